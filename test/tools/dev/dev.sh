#!/usr/bin/env bash
# wavegate's local cluster: a real control plane from pinned Go modules (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler) with kwok's fake nodes, run by kwokctl's binary
# runtime, plus wavegate's manager and the wait-Job pod runner as local processes. Everything
# listens on 127.0.0.1; state lives in .dev/ (gitignored).
#   dev.sh up | down       ENGINES="argocd flux certmanager" also runs those engines against the cluster;
#                          with certmanager, wavegate's webhook serves the certificate cert-manager
#                          issues (config/dev-certmanager: config/default's certificate mode)
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

# has_engine reports whether ENGINES names an engine.
has_engine() { [[ " ${ENGINES:-} " == *" $1 "* ]]; }

up() {
	mkdir -p "$dev"
	# Where the webhook's certificate comes from: the manager's own (self-managed), or, with
	# ENGINES=certmanager, config/default's cert-manager mode.
	local mode=self-managed config=config/dev
	if has_engine certmanager; then mode=cert-manager config=config/dev-certmanager; fi
	if running manager && [ "$(cat "$dev/cert-mode" 2>/dev/null)" != "$mode" ]; then
		say "the local cluster's manager runs with $(cat "$dev/cert-mode" 2>/dev/null || echo other) certificates, not $mode: run 'make dev-down' first"
		exit 1
	fi
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
	# kwok's controller makes the node Ready: if it did not start (a bad configuration), say so now,
	# not as pods that stay Pending.
	"$kubectl" wait --for=condition=Ready node/kwok-node-0 --timeout=60s >/dev/null ||
		{ say "the kwok node did not become Ready"; tail -5 "$dev/kwok/clusters/$cluster/logs/kwok-controller.log" >&2; exit 1; }
	[ "$mode" = cert-manager ] && "$root/test/tools/dev/certmanager.sh" up
	say "installing wavegate's CRDs and webhook configurations ($config)"
	"$kubectl" apply -k "$root/$config" >/dev/null
	established wavepolicies.wavegate.io sequences.wavegate.io
	local certs=(--cert-mode self-managed --cert-ips 127.0.0.1)
	if [ "$mode" = cert-manager ]; then
		serving_cert
		certs=(--cert-mode cert-manager)
	fi
	say "starting wavegate's manager ($mode certificates) and the wait-Job pod runner"
	if ! running manager; then
		for port in 18081 18082 19443; do
			if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
				say "127.0.0.1:$port is in use (another local cluster? run 'make dev-down' in its checkout)"
				exit 1
			fi
		done
		echo "$mode" >"$dev/cert-mode"
	fi
	# The manager runs as its ServiceAccount (the kubeconfig impersonates it), with the roles that
	# config/rbac installs: a permission they lack fails here as on a real cluster.
	"$kubectl" config view --raw --minify |
		sed '/^  user:$/a\    as: system:serviceaccount:wavegate-system:wavegate-manager' >"$dev/manager.kubeconfig"
	start manager "$root/bin/wavegate" manager --kubeconfig "$dev/manager.kubeconfig" --leader-elect=false \
		--metrics-bind-address 0 --health-probe-bind-address "$health" --webhook-host 127.0.0.1 --webhook-port 19443 \
		--webhook-cert-dir "$dev/certs" "${certs[@]}" --namespace wavegate-system --pprof-bind-address 127.0.0.1:18082 \
		--waiter-image wavegate:dev --zap-log-level info --zap-time-encoding rfc3339nano
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

# serving_cert waits until cert-manager has acted on config/dev-certmanager (the Issuers and the
# Certificates Ready, wavegate's CA injected into every entry of both webhook configurations),
# then writes the Secret's tls.crt and tls.key into .dev/certs, where the manager reads them as a
# pod reads the Secret mounted by config/default. (They are written once: no kubelet refreshes
# them after a renewal, 60 days on.)
serving_cert() {
	local ns=wavegate-system cert=wavegate-serving-cert secret ca
	say "waiting for cert-manager: Issuers and Certificates Ready, CA injected into both webhook configurations"
	"$kubectl" wait -n "$ns" --for condition=Ready --timeout 60s issuer/wavegate-selfsigned-issuer certificate/wavegate-ca \
		issuer/wavegate-ca-issuer "certificate/$cert" >/dev/null ||
		{ "$kubectl" describe -n "$ns" issuer,certificate,certificaterequest >&2; exit 1; }
	secret=$("$kubectl" get -n "$ns" certificate "$cert" -o jsonpath='{.spec.secretName}')
	ca=$("$kubectl" get -n "$ns" secret "$secret" -o jsonpath='{.data.ca\.crt}')
	[ -n "$ca" ] || { say "Secret $ns/$secret has no ca.crt"; exit 1; }
	injected() { # kind name: every webhook entry's caBundle is the CA that signed the Secret
		local bundles b
		bundles=$("$kubectl" get "$1" "$2" -o jsonpath='{range .webhooks[*]}{.clientConfig.caBundle}{" "}{end}')
		[ -n "$bundles" ] || return 1
		for b in $bundles; do [ "$b" = "$ca" ] || return 1; done
	}
	both() {
		injected mutatingwebhookconfiguration wavegate-mutating-webhook-configuration &&
			injected validatingwebhookconfiguration wavegate-validating-webhook-configuration
	}
	await() { for _ in $(seq 150); do both && return; sleep 0.2; done; both; }
	if ! await; then
		# The cainjector reconciles a configuration when it or the CA's Secret changes; a CI run once
		# saw it miss the Secret's creation (not found at the first pass, nothing after). Say so, show
		# what the configurations carry, and ask it once more, as a user would, by touching them.
		say "cert-manager's cainjector had not injected the CA after 30 s; what the configurations carry (sha256 of each caBundle, then of the CA):"
		# (Diagnostics only: a failure here is reported, not fatal, so that the retry still runs.)
		for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
			"$kubectl" get "$kind" "wavegate-${kind%webhookconfiguration}-webhook-configuration" \
				-o jsonpath='{range .webhooks[*]}{.clientConfig.caBundle}{"\n"}{end}' |
				while read -r b; do printf '   %s %s\n' "$kind" "$(printf %s "$b" | sha256sum | cut -c1-16)" >&2; done ||
				say "could not read $kind"
		done
		printf '   CA %s\n' "$(printf %s "$ca" | sha256sum | cut -c1-16)" >&2
		"$kubectl" get -n "$ns" certificate,certificaterequest >&2 || true
		say "re-annotating both configurations so that the cainjector reconciles them again"
		"$kubectl" annotate --overwrite mutatingwebhookconfiguration/wavegate-mutating-webhook-configuration \
			validatingwebhookconfiguration/wavegate-validating-webhook-configuration wavegate.io/dev-reinject="$(date +%s)" >/dev/null ||
			say "could not annotate the webhook configurations"
		await || { say "cert-manager's cainjector did not inject the CA:"; tail -40 "$dev/certmanager-cainjector.log" >&2; exit 1; }
	fi
	mkdir -p "$dev/certs"
	(
		umask 077
		"$kubectl" get -n "$ns" secret "$secret" -o jsonpath='{.data.tls\.crt}' | base64 -d >"$dev/certs/.tls.crt"
		"$kubectl" get -n "$ns" secret "$secret" -o jsonpath='{.data.tls\.key}' | base64 -d >"$dev/certs/.tls.key"
	)
	mv "$dev/certs/.tls.key" "$dev/certs/tls.key"
	mv "$dev/certs/.tls.crt" "$dev/certs/tls.crt"
	say "the webhook serves Secret $ns/$secret, issued by cert-manager"
}

# engines starts the GitOps engines named in ENGINES (built by `make cluster-assets ENGINES=...`).
engines() {
	for engine in ${ENGINES:-}; do
		case $engine in
		argocd) argocd_up ;;
		flux) "$root/test/tools/dev/flux.sh" up ;;
		certmanager) ;; # started before the manager, whose certificate it issues
		*) say "unknown engine $engine (known: argocd flux certmanager)"; exit 1 ;;
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
	[ -f "$dev/certmanager-controller.pid" ] && "$root/test/tools/dev/certmanager.sh" down
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
