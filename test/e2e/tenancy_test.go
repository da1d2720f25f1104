//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"wavegate.io/wavegate/pkg/keys"
)

// TestTenantsCannotCaptureEachOther: two tenants on the local cluster. The tenant's capture attempt
// (a Deployment that names the victim's sequence, whose pods could never schedule) is denied by
// kubectl apply with a message naming the label and the fix; the victim's rollout and teardown go
// on unaffected. A namespace that did not opt in is left untouched by every controller.
func TestTenantsCannotCaptureEachOther(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	applyYAML(t, `apiVersion: v1
kind: Namespace
metadata: {name: victim, labels: {wavegate.io/enabled: "true"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: tenant, labels: {wavegate.io/enabled: "true"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: plain}
`)
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "namespace", "victim", "tenant", "plain", "--wait=false").Run()
	})

	capture := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: zzz
  namespace: tenant
  labels: {wavegate.io/group: zzz, wavegate.io/group-order: "0", wavegate.io/sequence: victim}
spec:
  selector: {matchLabels: {app: zzz}}
  template:
    metadata: {labels: {app: zzz}}
    spec:
      nodeSelector: {nowhere: "true"}
      containers: [{name: c, image: zzz}]
`
	f := writeTemp(t, capture)
	out, err := exec.Command(kubectl, "apply", "-f", f).CombinedOutput()
	g.Expect(err).To(HaveOccurred(), "the capture was admitted: %s", out)
	g.Expect(string(out)).To(And(ContainSubstring("metadata.labels[wavegate.io/sequence]"),
		ContainSubstring("namespace tenant may join only its own sequences"), ContainSubstring("spec.sequences")))

	// The victim: a web Deployment after a database; it rolls out, then is deleted in order.
	applyYAML(t, `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: victim
  labels: {wavegate.io/group: database, wavegate.io/group-order: "0"}
spec:
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: c, image: postgres}]}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: victim
  labels: {wavegate.io/group: web, wavegate.io/group-order: "1"}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: web}]}
`)
	waitSummary(t, "victim", "database 1/1 Released, web 1/1 Released")

	// The opted-out namespace: a labeled ConfigMap and Deployment get nothing from wavegate.
	applyYAML(t, `apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
  namespace: plain
  labels: {wavegate.io/group: database, wavegate.io/group-order: "0"}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: plain
  labels: {wavegate.io/group: web, wavegate.io/group-order: "1"}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: web}]}
`)
	g.Consistently(func(g Gomega) {
		_, err := exec.Command(kubectl, "get", "sequence", "plain").Output()
		g.Expect(err).To(HaveOccurred(), "a Sequence was created for namespace plain")
		jobs, err := cs.BatchV1().Jobs("plain").List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(jobs.Items).To(BeEmpty())
		rbs, err := cs.RbacV1().RoleBindings("plain").List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(rbs.Items).To(BeEmpty())
		pods, err := cs.CoreV1().Pods("plain").List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range pods.Items {
			g.Expect(p.Spec.SchedulingGates).To(BeEmpty())
		}
		cm, err := cs.CoreV1().ConfigMaps("plain").Get(ctx, "cfg", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cm.Finalizers).To(BeEmpty())
		g.Expect(cm.Annotations).NotTo(HaveKey(keys.ArgoCDSyncWaveAnnotation))
	}).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

	deleteNamespaceTimed(t, "victim")
}

// TestDeclaredCrossNamespaceSequence: the platform declares sequence "platform" for the namespaces
// labeled team=platform; the operator runs in namespace ops, its Widgets live in namespace apps.
// Install is ordered across the namespaces (the Widgets' group is released only after the
// operator's), and deleting both namespaces at once keeps the operator running until the Widgets
// in the other namespace are gone.
func TestDeclaredCrossNamespaceSequence(t *testing.T) {
	t.Parallel()
	startWidgetOperator(t)
	applyYAML(t, `apiVersion: wavegate.io/v1alpha1
kind: WavePolicy
metadata: {name: platform}
spec:
  sequences:
  - name: platform
    namespaceSelector: {matchLabels: {team: platform}}
`)
	t.Cleanup(func() { _ = exec.Command(kubectl, "delete", "wavepolicy", "platform").Run() })
	// The operator in ops finalizes the Widgets of apps: a ClusterRole lets its ServiceAccount.
	applyYAML(t, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: widget-operator-ops}
rules:
- {apiGroups: [example.com], resources: [widgets], verbs: [get, list, watch, update, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: widget-operator-ops}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: widget-operator-ops}
subjects: [{kind: ServiceAccount, name: widget-operator, namespace: ops}]
`)
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "clusterrole,clusterrolebinding", "widget-operator-ops").Run()
	})
	ops := strings.ReplaceAll(operatorApp("ops", "Deployment", 0), `wavegate.io/enabled: "true"`, `wavegate.io/enabled: "true", team: platform`)
	ops = strings.ReplaceAll(ops, `wavegate.io/group-order: "1"}`, `wavegate.io/group-order: "1", wavegate.io/sequence: platform}`)
	var widgets strings.Builder
	widgets.WriteString("apiVersion: v1\nkind: Namespace\nmetadata: {name: apps, labels: {wavegate.io/enabled: \"true\", team: platform}}\n")
	for i := range 2 {
		fmt.Fprintf(&widgets, `---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w%d
  namespace: apps
  annotations: {example.com/operator-namespace: ops}
  labels: {wavegate.io/group: instances, wavegate.io/group-order: "2", wavegate.io/sequence: platform}
  finalizers: [example.com/cleanup]
`, i)
	}
	g := NewWithT(t)
	g.Eventually(func() error {
		return exec.Command(kubectl, "apply", "-f", writeTemp(t, ops), "-f", writeTemp(t, widgets.String())).Run()
	}).WithTimeout(30 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
	waitSummary(t, "platform", "operator 4/4 Released, instances 2/2 Released")

	start := time.Now()
	out, err := exec.Command(kubectl, "delete", "namespace", "ops", "apps", "--wait=true", "--timeout=150s").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	t.Logf("both namespaces deleted in %s", time.Since(start).Round(100*time.Millisecond))
	for _, ns := range []string{"ops", "apps"} {
		_, err := cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
		g.Expect(err).To(HaveOccurred(), "namespace %s is stuck", ns)
	}
}

func writeTemp(t testing.TB, manifests string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "m.yaml")
	if err := os.WriteFile(f, []byte(manifests), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
