//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestClaimThatWaitsForItsConsumer: a StorageClass with volumeBindingMode WaitForFirstConsumer, a
// PersistentVolume on the node, a claim in group storage (order 1) and the Deployment that mounts
// it in group app (order 2). The claim stays Pending until a pod that uses it is scheduled, so it
// counts as ready for ordering: app is released, the real scheduler picks the volume, the real PV
// controller binds the claim, and the consumer becomes Available.
func TestClaimThatWaitsForItsConsumer(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	applyYAML(t, `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: wffc}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: wffc-0}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: wffc
  local: {path: /mnt/wffc-0}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [kwok-node-0]}]
---
apiVersion: v1
kind: Namespace
metadata: {name: storage, labels: {wavegate.io/enabled: "true"}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: storage
  labels: {wavegate.io/group: storage, wavegate.io/group-order: "1"}
spec:
  storageClassName: wffc
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  namespace: storage
  labels: {wavegate.io/group: app, wavegate.io/group-order: "2"}
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers: [{name: c, image: app, volumeMounts: [{name: data, mountPath: /data}]}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
`)
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "namespace", "storage", "--wait=true", "--timeout=60s").Run()
		_ = exec.Command(kubectl, "delete", "pv", "wffc-0", "--wait=false").Run()
		_ = exec.Command(kubectl, "delete", "storageclass", "wffc").Run()
	})
	waitSummary(t, "storage", "storage 1/1 Released, app 1/1 Released")
	g.Eventually(func(g Gomega) corev1.PersistentVolumeClaimPhase {
		pvc, err := cs.CoreV1().PersistentVolumeClaims("storage").Get(ctx, "data", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return pvc.Status.Phase
	}).WithTimeout(time.Minute).Should(Equal(corev1.ClaimBound))
	run(t, "wait", "-n", "storage", "--for", "condition=Available", "deployment/app", "--timeout=60s")
}
