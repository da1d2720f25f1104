#!/usr/bin/env bash
# `make bench-release` and `make bench-engines`: starts the local cluster (make dev-up, with the
# GitOps engines in ENGINES), runs a benchmark of test/e2e against it (real control plane, wait-Job
# pods run for real), and stops the cluster again whatever the outcome.
#   BENCH       the benchmark (a -bench pattern), ReleaseLatency by default
#   BENCHTIME   -benchtime, 1x by default
#   BENCHCOUNT  -count, 1 by default (make bench-engines BENCHCOUNT=3: three runs of each case)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
export KUBECONFIG=$root/.dev/kubeconfig KUBECACHEDIR=$root/.dev/kube-cache
trap '"$root/test/tools/dev/dev.sh" down' EXIT
"$root/test/tools/dev/dev.sh" up
cd "$root" && go test -tags e2e -run '^$' -bench "${BENCH:-ReleaseLatency}" -benchtime "${BENCHTIME:-1x}" -count "${BENCHCOUNT:-1}" -timeout 30m ./test/e2e/ "$@"
