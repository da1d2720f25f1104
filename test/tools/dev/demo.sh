#!/usr/bin/env bash
# `make demo`: wavegate on a local cluster in one command. Starts the cluster (dev.sh up), applies
# the examples in one command each, prints a live timeline of gating and releases, deletes
# everything at once and prints the teardown order, then stops everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=${KUBE_BIN:?}
dev=$root/.dev
export KUBECONFIG=$dev/kubeconfig KUBECACHEDIR=$dev/kube-cache
kubectl() { "$bin/kubectl" "$@"; }
timeline() { "$root/bin/timeline" --kubeconfig "$KUBECONFIG" "$@"; }
section() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

trap '"$root/test/tools/dev/dev.sh" down' EXIT
"$root/test/tools/dev/dev.sh" up
nohup "$root/bin/widget-operator" --kubeconfig "$KUBECONFIG" >"$dev/widget-operator.log" 2>&1 &
echo $! >"$dev/widget-operator.pid"

section "1. Ordered install, one command: kubectl apply -f examples/shop (database -> migrate -> web)"
timeline --namespaces shop --until released &
tl=$!
kubectl apply -f "$root/examples/shop"
wait $tl
section "The database's wait Job, line by line"
cat "$dev"/pods/shop_wavegate-wait-database-*.log
kubectl get sequences

section "2. An operator, its CRD and its custom resources"
kubectl apply -f "$root/examples/widgets/policy.yaml"
# The CRD joins a sequence the policy declares: retry until every webhook replica has loaded it.
for _ in $(seq 50); do kubectl apply -f "$root/examples/widgets/crd.yaml" 2>/dev/null && break; sleep 0.2; done
kubectl wait --for condition=Established crd/widgets.example.com --timeout 60s
timeline --namespaces widgets --until released &
tl=$!
kubectl apply -f "$root/examples/widgets/app.yaml"
wait $tl

section "3. Ordered teardown: everything deleted at once (kubectl delete -f, namespaces included)"
timeline --namespaces shop,widgets --until gone &
tl=$!
kubectl delete -f "$root/examples/widgets/app.yaml" -f "$root/examples/shop" --wait=false
wait $tl
kubectl delete -f "$root/examples/widgets/crd.yaml" --wait --timeout 60s
kill "$(cat "$dev/widget-operator.pid")" 2>/dev/null || true
section "Done: nothing stuck. Next: make test"
