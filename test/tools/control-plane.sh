#!/usr/bin/env bash
# Builds the real Kubernetes control-plane binaries that wavegate's tests and local cluster run,
# from pinned Go modules (no prebuilt downloads), into a per-version user cache directory.
#
#   test/tools/control-plane.sh <dest-dir> <binary>...
#
# Binaries: etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl helm, and
# the engines the local cluster can run: argocd, flux (Flux's kustomize-controller, with its CRDs and
# source-controller's in <dest-dir>/flux-crds-<version>/), certmanager (cert-manager's certificate
# controllers and cainjector, with its CRDs in <dest-dir>/certmanager-<version>-files/crds/).
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
	argocd) # Argo CD's application controller and repo server (and an in-memory redis), one binary
		argocd_version=$("$here/version.sh" argocd github.com/argoproj/argo-cd/v3)
		[ -x "$dest/argocd-$argocd_version" ] || echo ">> Argo CD $argocd_version: 3-20 min on 2 cores, depending on the Go build cache" >&2
		build argocd "argocd-$argocd_version" . "-s -w"
		# What Argo CD's image ships besides the binary, from the same module: its CRDs, and the
		# script the repo server runs on every manifest generation (commit signature check).
		if [ ! -d "$dest/argocd-$argocd_version-files" ]; then
			src=$(cd "$here/argocd" && go list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)
			rm -rf "$dest/.argocd-files.tmp"
			mkdir -p "$dest/.argocd-files.tmp/crds" "$dest/.argocd-files.tmp/bin"
			cp "$src/manifests/crds/application-crd.yaml" "$src/manifests/crds/appproject-crd.yaml" "$dest/.argocd-files.tmp/crds/"
			install -m 0755 "$src/hack/git-verify-wrapper.sh" "$dest/.argocd-files.tmp/bin/"
			mv "$dest/.argocd-files.tmp" "$dest/argocd-$argocd_version-files"
		fi ;;
	flux | kustomize-controller) # Flux's kustomize-controller, pinned by test/tools/flux/go.mod
		build flux kustomize-controller-"$("$here/version.sh" flux github.com/fluxcd/kustomize-controller)" github.com/fluxcd/kustomize-controller "-s -w"
		# The CRDs it needs: its own Kustomization, and source-controller's (it watches them all;
		# ExternalArtifact is the source wavegate's tests use). source-controller does not build
		# here: only its CRD files are taken from the module, at the version tools.go names.
		if [ ! -d "$dest/flux-crds-$("$here/version.sh" flux github.com/fluxcd/kustomize-controller)" ]; then
			kc=$(cd "$here/flux" && go list -m -f '{{.Dir}}' github.com/fluxcd/kustomize-controller)
			sc_version=$(sed -nE 's#^//[[:space:]]*source-controller:[[:space:]]*(v[^[:space:]]+).*#\1#p' "$here/flux/tools.go")
			sc=$(cd "$here/flux" && go mod download -json "github.com/fluxcd/source-controller@$sc_version" | sed -nE 's#^[[:space:]]*"Dir": "(.*)",?$#\1#p')
			[ -d "$sc/config/crd/bases" ] || { echo "no CRDs in source-controller $sc_version ($sc)" >&2; exit 1; }
			rm -rf "$dest/.flux-crds.tmp"
			mkdir -p "$dest/.flux-crds.tmp"
			install -m 0644 "$kc"/config/crd/bases/*.yaml "$sc"/config/crd/bases/*.yaml "$dest/.flux-crds.tmp/"
			mv "$dest/.flux-crds.tmp" "$dest/flux-crds-$("$here/version.sh" flux github.com/fluxcd/kustomize-controller)"
		fi ;;
	certmanager) # cert-manager's certificate controllers and cainjector, one binary (test/tools/certmanager)
		cm_version=$("$here/version.sh" certmanager github.com/cert-manager/cert-manager)
		[ -x "$dest/certmanager-$cm_version" ] || echo ">> cert-manager $cm_version: 3-5 min on 2 cores (cold)" >&2
		build certmanager "certmanager-$cm_version" . "-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$cm_version"
		# Its CRDs, from the same module (what cert-manager's release manifests install).
		if [ ! -d "$dest/certmanager-$cm_version-files" ]; then
			src=$(cd "$here/certmanager" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
			[ -f "$src/deploy/crds/cert-manager.io_certificates.yaml" ] || { echo "no CRDs in cert-manager $cm_version ($src)" >&2; exit 1; }
			rm -rf "$dest/.certmanager-files.tmp"
			mkdir -p "$dest/.certmanager-files.tmp/crds"
			install -m 0644 "$src"/deploy/crds/*.yaml "$dest/.certmanager-files.tmp/crds/"
			mv "$dest/.certmanager-files.tmp" "$dest/certmanager-$cm_version-files"
		fi ;;
	*) echo "unknown binary $bin" >&2; exit 2 ;;
	esac
done
