#!/usr/bin/env bash
# wavegate's local cluster: a real control plane from pinned Go modules (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler) with kwok's fake nodes, run by kwokctl's binary
# runtime, plus wavegate's manager and the wait-Job pod runner as local processes. Everything
# listens on 127.0.0.1; state lives in .dev/ (gitignored).
#   dev.sh up | down       ENGINES="argocd flux" also runs those GitOps engines against the cluster
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=${KUBE_BIN:?KUBE_BIN must name the directory of the control-plane binaries}
dev=$root/.dev
export KWOK_WORKDIR=$dev/kwok KUBECACHEDIR=$dev/kube-cache KUBECONFIG=$dev/kubeconfig
kubectl=$bin/kubectl
cluster=wavegate
health=127.0.0.1:18081

say() { printf '>> %s\n' "$*" >&2; }

running() { [ -f "$dev/$1.pid" ] && kill -0 "$(cat "$dev/$1.pid")" 2>/dev/null; }

# ready asks the manager's readiness probe (bash's /dev/tcp: no curl needed).
ready() {
	(
		exec 3<>"/dev/tcp/${health%:*}/${health#*:}" || exit 1
		printf 'GET /readyz HTTP/1.0\r\nHost: %s\r\n\r\n' "$health" >&3
		read -r line <&3 || exit 1
		[[ $line == *" 200 "* ]]
	) 2>/dev/null
}

# established waits until CRDs are Established (kubectl wait fails at once on a CRD whose status
# has not been written yet, so it is retried).
established() { # crd...
	for _ in $(seq 100); do
		"$kubectl" wait --for condition=Established --timeout 60s "${@/#/crd/}" >/dev/null 2>&1 && return
		sleep 0.2
	done
	"$kubectl" wait --for condition=Established --timeout 1s "${@/#/crd/}" >/dev/null
}

start() { # name command...
	local name=$1; shift
	if running "$name"; then return; fi
	nohup "$@" >"$dev/$name.log" 2>&1 &
	echo $! >"$dev/$name.pid"
}

up() {
	mkdir -p "$dev"
	if [ ! -f "$dev/kubeconfig" ] || ! "$kubectl" get --raw /readyz >/dev/null 2>&1; then
		say "starting the control plane (kwokctl, binary runtime)"
		"$root/test/tools/dev/kwokctl-config.sh" "$bin" >"$dev/kwokctl.yaml"
		"$bin/kwokctl" create cluster --name "$cluster" --config "$dev/kwokctl.yaml" --kubeconfig "$dev/kubeconfig" --wait 2m >"$dev/kwokctl.log" 2>&1 ||
			{ cat "$dev/kwokctl.log" >&2; exit 1; }
	fi
	"$kubectl" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-0
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {type: kwok, kubernetes.io/hostname: kwok-node-0}
spec: {}
YAML
	say "installing wavegate's CRDs and webhook configurations (config/dev)"
	"$kubectl" apply -k "$root/config/dev" >/dev/null
	established wavepolicies.wavegate.io sequences.wavegate.io
	say "starting wavegate's manager and the wait-Job pod runner"
	if ! running manager; then
		for port in 18081 19443; do
			if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
				say "127.0.0.1:$port is in use (another local cluster? run 'make dev-down' in its checkout)"
				exit 1
			fi
		done
	fi
	start manager "$root/bin/wavegate" manager --kubeconfig "$dev/kubeconfig" --leader-elect=false \
		--metrics-bind-address 0 --health-probe-bind-address "$health" --webhook-host 127.0.0.1 --webhook-port 19443 \
		--webhook-cert-dir "$dev/certs" --cert-mode self-managed --cert-ips 127.0.0.1 --namespace wavegate-system \
		--waiter-image wavegate:dev --zap-log-level info
	start podrunner "$root/bin/podrunner" --kubeconfig "$dev/kubeconfig" --wavegate "$root/bin/wavegate" --kubectl "$kubectl" \
		--logs "$dev/pods"
	for _ in $(seq 300); do
		if running manager && ready; then
			say "wavegate is serving. Use the cluster with: export KUBECONFIG=$dev/kubeconfig"
			say "  $kubectl get sequences; logs in $dev/*.log; wait-Job logs in $dev/pods/; stop with: make dev-down"
			engines
			return
		fi
		running manager || { tail -20 "$dev/manager.log" >&2; exit 1; }
		sleep 0.2
	done
	say "wavegate did not become ready"; tail -20 "$dev/manager.log" >&2; exit 1
}

# engines starts the GitOps engines named in ENGINES (built by `make cluster-assets ENGINES=...`).
engines() {
	for engine in ${ENGINES:-}; do
		case $engine in
		argocd) argocd_up ;;
		flux) "$root/test/tools/dev/flux.sh" up ;;
		*) say "unknown engine $engine (known: argocd flux)"; exit 1 ;;
		esac
	done
}

# argocd_up runs Argo CD's real application controller and repo server as local processes, with an
# in-memory redis, all on 127.0.0.1. Applications sync from file:// Git repositories (no Git server).
argocd_up() {
	local version argocd
	version=$("$root/test/tools/version.sh" argocd github.com/argoproj/argo-cd/v3)
	argocd=$bin/argocd-$version
	[ -x "$argocd" ] || { say "$argocd is missing: run make cluster-assets ENGINES=argocd"; exit 1; }
	say "starting Argo CD $version (application-controller, repo-server, redis)"
	"$kubectl" apply --server-side -f "$bin/argocd-$version-files/crds/" >/dev/null
	established applications.argoproj.io appprojects.argoproj.io
	"$kubectl" apply -f "$root/test/tools/dev/argocd.yaml" >/dev/null
	mkdir -p "$dev/argocd/tls" "$dev/argocd/ssh" "$dev/argocd/home"
	start argocd-redis "$argocd" redis 127.0.0.1:16379
	PATH=$bin/argocd-$version-files/bin:$PATH HOME=$dev/argocd/home ARGOCD_GPG_ENABLED=false \
		ARGOCD_TLS_DATA_PATH=$dev/argocd/tls ARGOCD_SSH_DATA_PATH=$dev/argocd/ssh \
		start argocd-repo-server "$argocd" repo-server --address 127.0.0.1 --port 18084 --metrics-address 127.0.0.1 \
		--metrics-port 18085 --disable-tls --client-ca-path= --redis 127.0.0.1:16379 --logformat text
	HOME=$dev/argocd/home ARGOCD_FAKE_IN_CLUSTER=true \
		start argocd-application-controller "$argocd" application-controller --kubeconfig "$dev/kubeconfig" --namespace argocd \
		--repo-server 127.0.0.1:18084 --repo-server-plaintext --redis 127.0.0.1:16379 --metrics-port 18086 \
		--status-processors 2 --operation-processors 2 --logformat text
	for _ in $(seq 150); do # the repo server listens once it is ready
		(exec 3<>/dev/tcp/127.0.0.1/18084) 2>/dev/null && break
		for name in argocd-redis argocd-repo-server argocd-application-controller; do
			running "$name" || { say "$name stopped:"; tail -20 "$dev/$name.log" >&2; exit 1; }
		done
		sleep 0.2
	done
	say "Argo CD is running: Applications in namespace argocd (logs in $dev/argocd-*.log)"
}

down() {
	[ -f "$dev/flux-kustomize-controller.pid" ] && "$root/test/tools/dev/flux.sh" down
	for name in argocd-application-controller argocd-repo-server argocd-redis podrunner manager; do
		if running "$name"; then
			kill "$(cat "$dev/$name.pid")" 2>/dev/null || true
			for _ in $(seq 50); do running "$name" || break; sleep 0.1; done
		fi
		rm -f "$dev/$name.pid"
	done
	if [ -d "$dev/kwok" ]; then
		"$bin/kwokctl" delete cluster --name "$cluster" --kubeconfig "$dev/kubeconfig" >/dev/null 2>&1 || true
	fi
	rm -rf "$dev"
	say "local cluster stopped and removed"
}

case ${1:-} in
up) up ;;
down) down ;;
*) echo "usage: dev.sh up|down" >&2; exit 2 ;;
esac
