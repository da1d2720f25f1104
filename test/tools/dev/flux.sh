#!/usr/bin/env bash
# Flux's real kustomize-controller on wavegate's local cluster, as a local process beside the ones
# dev.sh starts (log and PID in .dev/, health on 127.0.0.1:18088, metrics off, no leader election).
# source-controller does not build here: Kustomizations take an ExternalArtifact as their source,
# published by test/tools/artifact (a .tar.gz served on loopback), e.g.
#   go run ./test/tools/artifact -dir DIR -namespace NS -name NAME -watch 1s &
#   kubectl apply -f - <<<'{"apiVersion":"kustomize.toolkit.fluxcd.io/v1","kind":"Kustomization",
#     "metadata":{"name":"NAME","namespace":"NS"},"spec":{"interval":"1m","path":"./","prune":true,
#     "sourceRef":{"kind":"ExternalArtifact","name":"NAME"}}}'
#
#   flux.sh up | down     KUBE_BIN names the cache directory (test/tools/control-plane.sh <dir> flux
#                         builds the binary and <dir>/flux-crds-<version>); the cluster is
#                         $KUBECONFIG, by default .dev/kubeconfig. `make dev-up ENGINES=flux` runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=${KUBE_BIN:?KUBE_BIN must name the directory of the control-plane binaries}
dev=$root/.dev
export KUBECONFIG=${KUBECONFIG:-$dev/kubeconfig} KUBECACHEDIR=${KUBECACHEDIR:-$dev/kube-cache}
kubectl=$bin/kubectl
version=$("$root/test/tools/version.sh" flux github.com/fluxcd/kustomize-controller)
controller=$bin/kustomize-controller-$version
crds=$bin/flux-crds-$version
name=flux-kustomize-controller
health=127.0.0.1:18088

say() { printf '>> %s\n' "$*" >&2; }

running() { [ -f "$dev/$1.pid" ] && kill -0 "$(cat "$dev/$1.pid")" 2>/dev/null; }

# ready asks the controller's readiness probe (bash's /dev/tcp: no curl needed).
ready() {
	(
		exec 3<>"/dev/tcp/${health%:*}/${health#*:}" || exit 1
		printf 'GET /readyz HTTP/1.0\r\nHost: %s\r\n\r\n' "$health" >&3
		read -r line <&3 || exit 1
		[[ $line == *" 200 "* ]]
	) 2>/dev/null
}

up() {
	[ -x "$controller" ] && [ -d "$crds" ] ||
		{ say "$controller or $crds is missing: run make cluster-assets ENGINES=flux"; exit 1; }
	mkdir -p "$dev"
	say "installing Flux's CRDs (Kustomization, source-controller's sources incl. ExternalArtifact)"
	"$kubectl" apply --server-side -f "$crds/" >/dev/null
	# kubectl wait fails at once on a CRD whose status has not been written yet: retry.
	for _ in $(seq 100); do
		"$kubectl" wait --for condition=Established --timeout 60s \
			crd/kustomizations.kustomize.toolkit.fluxcd.io crd/externalartifacts.source.toolkit.fluxcd.io \
			crd/gitrepositories.source.toolkit.fluxcd.io crd/ocirepositories.source.toolkit.fluxcd.io \
			crd/buckets.source.toolkit.fluxcd.io >/dev/null 2>&1 && break
		sleep 0.2
	done
	if ! running "$name"; then
		if (exec 3<>"/dev/tcp/${health%:*}/${health#*:}") 2>/dev/null; then
			say "$health is in use (another local cluster? run 'make dev-down' in its checkout)"
			exit 1
		fi
		say "starting Flux's kustomize-controller"
		# The kubeconfig comes from $KUBECONFIG (the controller has no --kubeconfig flag). Its admin
		# identity applies everything; a Kustomization's spec.serviceAccountName would impersonate.
		nohup "$controller" --feature-gates=ExternalArtifact=true --watch-all-namespaces \
			--enable-leader-election=false --metrics-addr=0 --health-addr="$health" \
			--log-encoding=console >"$dev/$name.log" 2>&1 &
		echo $! >"$dev/$name.pid"
	fi
	for _ in $(seq 150); do
		if running "$name" && ready; then
			say "kustomize-controller is running (log in $dev/$name.log)"
			return
		fi
		running "$name" || { say "kustomize-controller stopped:"; tail -20 "$dev/$name.log" >&2; exit 1; }
		sleep 0.2
	done
	say "kustomize-controller did not become ready"; tail -20 "$dev/$name.log" >&2; exit 1
}

down() {
	if running "$name"; then
		kill "$(cat "$dev/$name.pid")" 2>/dev/null || true
		for _ in $(seq 50); do running "$name" || break; sleep 0.1; done
	fi
	rm -f "$dev/$name.pid"
	say "kustomize-controller stopped"
}

case ${1:-} in
up) up ;;
down) down ;;
*) echo "usage: flux.sh up|down" >&2; exit 2 ;;
esac
