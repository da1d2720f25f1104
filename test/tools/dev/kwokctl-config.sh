#!/usr/bin/env bash
# Prints the kwokctl configuration of wavegate's local cluster: binary runtime from local paths
# (nothing downloaded), everything on 127.0.0.1, kwok's controller playing 16 pod stages at once
# (KWOK_POD_PARALLELISM; kwok's default of 4 makes the one fake node start a burst of a hundred
# pods four at a time, where a real cluster's kubelets start them in parallel), kube-controller-manager
# with per-controller credentials (--use-service-account-credentials), and kwok's stock
# node and pod stages with one change: wavegate's wait-Job pods, and pods labeled
# dev.wavegate.io/exec=true (wait Jobs written by hand, in benchmarks that compare them with
# wavegate's), are excluded from the pod stages, so that kwok never fakes their completion; the
# dev pod runner executes them for real.
#   kwokctl-config.sh <bin-dir>
set -euo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
kwok_src=$(cd "$here/../kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
kube_version=$("$here/../version.sh" kube k8s.io/kubernetes)

cat <<YAML
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  kubeVersion: ${kube_version}
  bindAddress: 127.0.0.1
  etcdBinary: ${bin}/etcd
  kubeApiserverBinary: ${bin}/kube-apiserver
  kubeControllerManagerBinary: ${bin}/kube-controller-manager
  kubeSchedulerBinary: ${bin}/kube-scheduler
  kwokControllerBinary: ${bin}/kwok
  kubectlBinary: ${bin}/kubectl
  disableQPSLimits: true
componentsPatches:
# Each controller with its own ServiceAccount, as kubeadm and managed clusters run
# kube-controller-manager: the namespace controller's deletions are then its own
# (system:serviceaccount:kube-system:namespace-controller), which ordered teardown relies on.
- name: kube-controller-manager
  extraArgs:
  - key: use-service-account-credentials
    value: "true"
---
# kwokctl writes this document as kwok's whole configuration, without kwok's defaults: every
# option that has one is set here (the defaults but podPlayStageParallelism).
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: 10.0.0.0/24
  enableDebuggingHandlers: true
  enableProfilingHandler: true
  podPlayStageParallelism: ${KWOK_POD_PARALLELISM:-16}
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
YAML
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml; do
	echo "---"
	cat "$kwok_src/kustomize/stage/$f"
done
for f in pod-ready pod-complete pod-delete; do
	echo "---"
	# Deleted wait-Job pods too: the pod runner stops their process, reports its exit, then removes
	# them, as a kubelet does (kwok would remove them at once, without an exit).
	awk '{print} /^    matchExpressions:$/ {
		print "    - key: \x27.metadata.labels[\"wavegate.io/wait-job\"]\x27"
		print "      operator: \x27DoesNotExist\x27"
		print "    - key: \x27.metadata.labels[\"dev.wavegate.io/exec\"]\x27"
		print "      operator: \x27DoesNotExist\x27"
	}' "$kwok_src/kustomize/stage/pod/fast/$f.yaml"
done
