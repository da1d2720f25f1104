#!/usr/bin/env bash
# `make bench-release`: starts the local cluster (make dev-up), runs the release-latency benchmark
# against it (real control plane, wait-Job pods run for real), and stops the cluster again.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
export KUBECONFIG=$root/.dev/kubeconfig KUBECACHEDIR=$root/.dev/kube-cache
trap '"$root/test/tools/dev/dev.sh" down' EXIT
"$root/test/tools/dev/dev.sh" up
cd "$root" && go test -tags e2e -run '^$' -bench ReleaseLatency -benchtime "${BENCHTIME:-1x}" -timeout 30m ./test/e2e/ "$@"
