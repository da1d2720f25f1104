#!/usr/bin/env bash
# Builds the real Kubernetes control-plane binaries that wavegate's tests and local cluster run,
# from pinned Go modules (no prebuilt downloads), into a per-version user cache directory.
#
#   test/tools/control-plane.sh <dest-dir> <binary>...
#
# Binaries: etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl helm.
# A binary that is already in <dest-dir> is not rebuilt; each is built to a temporary name and moved
# into place, so an interrupted build never leaves a broken binary behind.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dest=$1; shift
mkdir -p "$dest"

kube_version=$("$here/version.sh" kube k8s.io/kubernetes)
kwok_version=$("$here/version.sh" kwok sigs.k8s.io/kwok)
minor=$(echo "$kube_version" | cut -d. -f2)
pkgs="k8s.io/component-base/version k8s.io/client-go/pkg/version"
ldflags="-s -w"
for p in $pkgs; do
	ldflags="$ldflags -X $p.gitVersion=$kube_version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
	ldflags="$ldflags -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

check() { # binary args...: the binary must report the pinned version, or the stamping failed
	local out
	out=$("$@" 2>&1) || true
	case $out in
	*"$kube_version"*) ;;
	*) echo "$1 reports '$out', not $kube_version" >&2; rm -f "$1"; exit 1 ;;
	esac
}

build() { # dir name package ldflags
	local dir=$1 name=$2 pkg=$3 flags=$4
	if [ -x "$dest/$name" ]; then return; fi
	echo ">> building $name into $dest (first run only; the whole control plane takes ~5-8 min cold)" >&2
	local start=$SECONDS
	(cd "$here/$dir" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "$flags" -o "$dest/.$name.tmp" "$pkg")
	case $name in
	kube-*) check "$dest/.$name.tmp" --version ;;
	kubectl) check "$dest/.$name.tmp" version --client ;;
	esac
	mv "$dest/.$name.tmp" "$dest/$name"
	echo ">> built $name in $((SECONDS - start))s" >&2
}

for bin in "$@"; do
	case $bin in
	etcd) build etcd etcd . "-s -w" ;;
	kube-apiserver | kube-controller-manager | kube-scheduler | kubectl)
		build kube "$bin" "k8s.io/kubernetes/cmd/$bin" "$ldflags" ;;
	kwok | kwokctl)
		build kwok "$bin" "sigs.k8s.io/kwok/cmd/$bin" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version" ;;
	helm) # the Helm CLI, pinned by the Helm e2e module (test/e2e/helm/go.mod)
		helm_version=$(cd "$here/../e2e/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v4)
		build ../e2e/helm helm helm.sh/helm/v4/cmd/helm "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version" ;;
	*) echo "unknown binary $bin" >&2; exit 2 ;;
	esac
done
