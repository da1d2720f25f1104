#!/usr/bin/env bash
# `make test-e2e`: starts the local cluster (make dev-up), runs the end-to-end suite against it
# with the real kubectl binary, and stops the cluster again whatever the outcome.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
export KUBECONFIG=$root/.dev/kubeconfig KUBECACHEDIR=$root/.dev/kube-cache
# On a failure the cluster's logs (the manager's, the engines', the wait Jobs') are kept in a temporary
# directory before the cluster goes, so that an ordering failure can be traced afterwards.
down() {
	rc=$?
	if [ "$rc" -ne 0 ] && [ -d "$root/.dev" ]; then
		logs=$(mktemp -d "${TMPDIR:-/tmp}/wavegate-e2e-logs.XXXXXX")
		cp -r "$root"/.dev/*.log "$root/.dev/pods" "$logs/" 2>/dev/null || true
		echo ">> the end-to-end run failed; the cluster's logs are kept in $logs" >&2
	fi
	"$root/test/tools/dev/dev.sh" down
	exit "$rc"
}
trap down EXIT
"$root/test/tools/dev/dev.sh" up
# -parallel 3: the tests that mark themselves parallel (they only wait, each in its own namespaces)
# run side by side, three at a time, after every serial test (those that change what the whole
# cluster shares: the Widget CRD's existence, wavegate's install and certificates, argocd-cm; or
# that aim at a deadline).
cd "$root" && go test -tags e2e -count 1 -timeout 15m -parallel 3 ./test/e2e/... "$@"
# The Helm SDK round trip lives in its own module, so that Helm's dependencies stay out of wavegate's.
cd "$root/test/e2e/helm" && KUBE_BIN=$KUBE_BIN go test -tags e2e -count 1 -timeout 10m ./... "$@"
