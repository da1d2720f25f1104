#!/usr/bin/env bash
# `make test-e2e`: starts the local cluster (make dev-up), runs the end-to-end suite against it
# with the real kubectl binary, and stops the cluster again whatever the outcome.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
export KUBECONFIG=$root/.dev/kubeconfig KUBECACHEDIR=$root/.dev/kube-cache
trap '"$root/test/tools/dev/dev.sh" down' EXIT
"$root/test/tools/dev/dev.sh" up
# -parallel 3: the tests that mark themselves parallel (they only wait, each in its own namespaces)
# run side by side, three at a time, after every serial test (those that change what the whole
# cluster shares: the Widget CRD's existence, wavegate's install and certificates, argocd-cm; or
# that aim at a deadline).
cd "$root" && go test -tags e2e -count 1 -timeout 15m -parallel 3 ./test/e2e/... "$@"
# The Helm SDK round trip lives in its own module, so that Helm's dependencies stay out of wavegate's.
cd "$root/test/e2e/helm" && KUBE_BIN=$KUBE_BIN go test -tags e2e -count 1 -timeout 10m ./... "$@"
