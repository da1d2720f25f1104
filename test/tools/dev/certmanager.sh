#!/usr/bin/env bash
# cert-manager on wavegate's local cluster: its certificate controllers (selfSigned and CA issuers)
# and its cainjector (webhook configurations), as local processes beside the ones dev.sh starts
# (logs and PIDs in .dev/, no leader election, everything on 127.0.0.1). Both come from one binary
# that test/tools/control-plane.sh builds from the pinned cert-manager module
# (test/tools/certmanager); its CRDs come from the same module. cert-manager's own webhook is not
# run (it only validates and defaults cert-manager's resources).
#
#   certmanager.sh up | down   KUBE_BIN names the cache directory (control-plane.sh <dir> certmanager
#                              builds <dir>/certmanager-<version> and <dir>/certmanager-<version>-files);
#                              the cluster is $KUBECONFIG, by default .dev/kubeconfig.
#                              `make dev-up ENGINES=certmanager` runs it, and makes wavegate's manager
#                              serve the certificate cert-manager issues (config/dev-certmanager).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=${KUBE_BIN:?KUBE_BIN must name the directory of the control-plane binaries}
dev=$root/.dev
export KUBECONFIG=${KUBECONFIG:-$dev/kubeconfig} KUBECACHEDIR=${KUBECACHEDIR:-$dev/kube-cache}
kubectl=$bin/kubectl
version=$("$root/test/tools/version.sh" certmanager github.com/cert-manager/cert-manager)
certmanager=$bin/certmanager-$version
crds=$bin/certmanager-$version-files/crds
# name metrics health, per process
processes=(
	"certmanager-controller 127.0.0.1:18090 127.0.0.1:18091 /livez"
	"certmanager-cainjector 127.0.0.1:18092 127.0.0.1:18093 /healthz"
)

say() { printf '>> %s\n' "$*" >&2; }

running() { [ -f "$dev/$1.pid" ] && kill -0 "$(cat "$dev/$1.pid")" 2>/dev/null; }

# healthy asks a health endpoint (bash's /dev/tcp: no curl needed).
healthy() { # addr path
	(
		exec 3<>"/dev/tcp/${1%:*}/${1#*:}" || exit 1
		printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$2" "$1" >&3
		read -r line <&3 || exit 1
		[[ $line == *" 200 "* ]]
	) 2>/dev/null
}

up() {
	[ -x "$certmanager" ] && [ -d "$crds" ] ||
		{ say "$certmanager or $crds is missing: run make cluster-assets ENGINES=certmanager"; exit 1; }
	mkdir -p "$dev"
	say "installing cert-manager's CRDs ($version)"
	"$kubectl" apply --server-side -f "$crds/" >/dev/null
	# kubectl wait fails at once on a CRD whose status has not been written yet: retry. The
	# cainjector watches Certificates from its start.
	for _ in $(seq 100); do
		"$kubectl" wait --for condition=Established --timeout 60s crd/certificates.cert-manager.io \
			crd/certificaterequests.cert-manager.io crd/issuers.cert-manager.io crd/clusterissuers.cert-manager.io >/dev/null 2>&1 && break
		sleep 0.2
	done
	local p name metrics health path
	for p in "${processes[@]}"; do
		read -r name metrics health path <<<"$p"
		running "$name" && continue
		for addr in "$metrics" "$health"; do
			if (exec 3<>"/dev/tcp/${addr%:*}/${addr#*:}") 2>/dev/null; then
				say "$addr is in use (another local cluster? run 'make dev-down' in its checkout)"
				exit 1
			fi
		done
		say "starting cert-manager's ${name#certmanager-}"
		nohup "$certmanager" "${name#certmanager-}" --kubeconfig "$KUBECONFIG" --metrics-address "$metrics" \
			--health-address "$health" >"$dev/$name.log" 2>&1 &
		echo $! >"$dev/$name.pid"
	done
	for p in "${processes[@]}"; do
		read -r name metrics health path <<<"$p"
		for _ in $(seq 150); do
			healthy "$health" "$path" && continue 2
			running "$name" || break
			sleep 0.2
		done
		say "cert-manager's ${name#certmanager-} is not healthy:"; tail -20 "$dev/$name.log" >&2; exit 1
	done
	say "cert-manager is running (logs in $dev/certmanager-*.log)"
}

down() {
	local p name
	for p in "${processes[@]}"; do
		read -r name _ <<<"$p"
		if running "$name"; then
			kill "$(cat "$dev/$name.pid")" 2>/dev/null || true
			for _ in $(seq 50); do running "$name" || break; sleep 0.1; done
		fi
		rm -f "$dev/$name.pid"
	done
	say "cert-manager stopped"
}

case ${1:-} in
up) up ;;
down) down ;;
*) echo "usage: certmanager.sh up|down" >&2; exit 2 ;;
esac
