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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
)

var widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// operatorShapes are the workloads an operator ships as, with the fields each needs.
var operatorShapes = map[string]string{
	"Deployment":  "replicas: 1\n  selector: {matchLabels: {app: widget-operator}}",
	"StatefulSet": "replicas: 1\n  serviceName: widget-operator\n  selector: {matchLabels: {app: widget-operator}}",
	"DaemonSet":   "selector: {matchLabels: {app: widget-operator}}",
}

// operatorApp is an opted-in namespace with the operator (group operator, order 1) as the given
// workload and n Widgets (group instances, order 2) carrying the finalizer only a running operator
// removes.
func operatorApp(ns, shape string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Namespace
metadata: {name: %[1]s, labels: {wavegate.io/enabled: "true"}}
---
%[4]s
---
apiVersion: apps/v1
kind: %[2]s
metadata:
  name: widget-operator
  namespace: %[1]s
  labels: {wavegate.io/group: operator, wavegate.io/group-order: "1"}
spec:
  %[3]s
  template:
    metadata: {labels: {app: widget-operator}}
    spec:
      serviceAccountName: widget-operator
      containers: [{name: operator, image: example.com/widget-operator:1}]
`, ns, shape, operatorShapes[shape], operatorAccess(ns))
	for i := range n {
		fmt.Fprintf(&b, `---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w%d
  namespace: %s
  labels: {wavegate.io/group: instances, wavegate.io/group-order: "2"}
  finalizers: [example.com/cleanup]
`, i, ns)
	}
	return b.String()
}

// operatorAccess is the operator's ServiceAccount and RBAC in namespace ns, in its group: the
// stand-in operator writes with that ServiceAccount's token (its Lease it creates itself).
func operatorAccess(ns string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: widget-operator
  namespace: %[1]s
  labels: {wavegate.io/group: operator, wavegate.io/group-order: "1"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: widget-operator
  namespace: %[1]s
  labels: {wavegate.io/group: operator, wavegate.io/group-order: "1"}
rules:
- {apiGroups: [example.com], resources: [widgets], verbs: [get, list, watch, update, patch]}
- {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, create, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: widget-operator
  namespace: %[1]s
  labels: {wavegate.io/group: operator, wavegate.io/group-order: "1"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: widget-operator}
subjects: [{kind: ServiceAccount, name: widget-operator, namespace: %[1]s}]`, ns)
}

// applyYAML writes manifests to a file and applies them with kubectl.
func applyYAML(t testing.TB, manifests string) string {
	t.Helper()
	f := writeTemp(t, manifests)
	run(t, "apply", "-f", f)
	return f
}

// startWidgetOperator runs the strict stand-in operator for the test's duration.
func startWidgetOperator(t *testing.T) {
	t.Helper()
	op := exec.Command(filepath.Join(root, "bin", "widget-operator"), "--kubeconfig", os.Getenv("KUBECONFIG"))
	if err := op.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Process.Kill(); _, _ = op.Process.Wait() })
	applyWidgetCRD(t)
}

// applyWidgetCRD applies the policy that lets the Widget CRD join sequence widgets, then the CRD,
// retrying until the webhook has loaded the policy.
func applyWidgetCRD(t *testing.T) {
	t.Helper()
	// Retried: tests that run in parallel apply them at the same moment, and a client-side apply
	// that finds nothing creates, so all but one get AlreadyExists; a retry patches instead.
	NewWithT(t).Eventually(func() error {
		out, err := exec.Command(kubectl, "apply", "-f", filepath.Join(example("widgets"), "policy.yaml"), "-f", filepath.Join(example("widgets"), "crd.yaml")).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	run(t, "wait", "--for", "condition=Established", "crd/widgets.example.com", "--timeout=60s")
}

// waitSummary waits until the summary of sequence seq contains summary.
func waitSummary(t *testing.T, seq, summary string) {
	t.Helper()
	NewWithT(t).Eventually(func() string { return sequenceSummaryOf(seq) }).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(ContainSubstring(summary), "sequence %s", seq)
}

// deleteNamespaceTimed deletes a namespace with kubectl and waits until it is gone; it returns how
// long that took.
func deleteNamespaceTimed(t *testing.T, ns string) time.Duration {
	t.Helper()
	start := time.Now()
	out, err := exec.Command(kubectl, "delete", "namespace", ns, "--wait=true", "--timeout=150s").CombinedOutput()
	if err != nil {
		left, _ := exec.Command(kubectl, "get", "all,widgets", "-n", ns, "-o", "wide").CombinedOutput()
		seq, _ := exec.Command(kubectl, "get", "sequence", ns, "-o", "yaml").CombinedOutput()
		t.Fatalf("namespace %s was not deleted: %v\n%s\nleft:\n%s\n%s", ns, err, out, left, seq)
	}
	return time.Since(start)
}

// TestNamespaceDeletionKeepsTheOperator deletes a namespace holding an operator (each workload
// shape) and its custom resources with `kubectl delete namespace`: the real namespace controller
// deletes every Pod, ReplicaSet, workload and Widget at once. The strict operator finalizes Widgets
// only while one of its pods is Running and not terminating, so the namespace goes away only if
// wavegate keeps the operator's pods until the Widgets are gone. The same namespace without Widgets
// is the baseline. The shapes run side by side, each in its own namespaces, against the one
// operator (a namespace deletion mostly waits: the namespace controller waits out its pods' grace
// period, about 16 s, even without Widgets).
func TestNamespaceDeletionKeepsTheOperator(t *testing.T) {
	t.Parallel()
	startWidgetOperator(t)
	for _, shape := range []string{"Deployment", "StatefulSet", "DaemonSet"} {
		t.Run(shape, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			ns := "td-" + strings.ToLower(shape)
			applyYAML(t, operatorApp(ns, shape, 2))
			waitSummary(t, ns, "instances 2/2 Released")
			held := deleteNamespaceTimed(t, ns)

			base := ns + "-baseline"
			applyYAML(t, operatorApp(base, shape, 0))
			waitSummary(t, base, "operator 4/4 Released")
			plain := deleteNamespaceTimed(t, base)
			t.Logf("namespace deletion with an operator %s and 2 Widgets: %s; without Widgets: %s", shape, held.Round(100*time.Millisecond), plain.Round(100*time.Millisecond))
			list, err := dyn.Resource(widgetsGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Items).To(BeEmpty(), "Widgets were stranded")
		})
	}
}

// TestNamespaceDeletionKeepsWhatTheOperatorNeeds: the operator's cleanup of a Widget takes 15 s, and
// the operator works only while it holds its Lease (renewed within 10 s, as controller-runtime's
// leader election) and is authorized with its ServiceAccount's token. The namespace controller
// deletes everything at once, the Lease (made by the operator, in no group) included, and a
// deleted Lease cannot be created again in a terminating namespace: unless wavegate keeps the
// Lease, and the ServiceAccount and RBAC, until the Widgets are gone, the operator stops before it
// is done and the namespace is stuck.
func TestNamespaceDeletionKeepsWhatTheOperatorNeeds(t *testing.T) {
	t.Parallel()
	startWidgetOperator(t)
	g := NewWithT(t)
	ns := "td-lease"
	app := strings.Replace(operatorApp(ns, "Deployment", 1), "  name: w0\n", "  name: w0\n  annotations: {example.com/cleanup-seconds: \"15\"}\n", 1)
	g.Expect(app).To(ContainSubstring("cleanup-seconds"))
	applyYAML(t, app)
	waitSummary(t, ns, "instances 1/1 Released")
	g.Eventually(func() error {
		_, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), "widget-operator", metav1.GetOptions{})
		return err
	}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "the operator holds no Lease")
	took := deleteNamespaceTimed(t, ns)
	// The namespace is gone, so no Widget was stranded in it: its deletion waits for all it holds.
	t.Logf("namespace deletion with a 15 s Widget cleanup: %s", took.Round(100*time.Millisecond))
}

// TestNamespaceDeletionKeepsTheOperatorsAccountBesideTheApps: the operator's ServiceAccount is in no
// group (a chart that labels only its workloads), and the later group has a ServiceAccount of its
// own, app. The real namespace controller deletes the ServiceAccounts as one collection in name
// order and stops at its first refusal: app goes first, and wavegate holds widget-operator (and
// default) until the Widget is gone. Deleted at once, widget-operator's tokens would be refused
// (it has no finalizer to keep it), the operator could not finalize the Widget, and the namespace
// would stay Terminating for good.
func TestNamespaceDeletionKeepsTheOperatorsAccountBesideTheApps(t *testing.T) {
	t.Parallel()
	startWidgetOperator(t)
	g := NewWithT(t)
	ns := "td-accounts"
	grouped := "  name: widget-operator\n  namespace: " + ns + "\n  labels: {wavegate.io/group: operator, wavegate.io/group-order: \"1\"}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n"
	app := operatorApp(ns, "Deployment", 1)
	g.Expect(app).To(ContainSubstring(grouped))
	app = strings.Replace(app, grouped, "  name: widget-operator\n  namespace: "+ns+"\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n", 1)
	app = strings.Replace(app, "  name: w0\n", "  name: w0\n  annotations: {example.com/cleanup-seconds: \"5\"}\n", 1)
	app += fmt.Sprintf(`---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: app
  namespace: %s
  labels: {wavegate.io/group: instances, wavegate.io/group-order: "2"}
`, ns)
	applyYAML(t, app)
	waitSummary(t, ns, "instances 2/2 Released")
	took := deleteNamespaceTimed(t, ns)
	t.Logf("namespace deletion, the operator's ServiceAccount in no group beside the app's: %s", took.Round(100*time.Millisecond))
}

// TestNamespaceAndCRDDeletedTogether: one `kubectl delete` of the namespace and the Widget CRD (group
// crds, order 0, joined to the namespace's sequence): the CRD's own cleanup deletes the Widgets, the
// namespace controller deletes everything else; the operator outlives the Widgets, the CRD
// outlives the operator, and nothing is stuck.
func TestNamespaceAndCRDDeletedTogether(t *testing.T) {
	startWidgetOperator(t)
	g := NewWithT(t)
	ns := "widgets"
	applyYAML(t, operatorApp(ns, "Deployment", 2))
	waitSummary(t, ns, "instances 2/2 Released")
	out, err := exec.Command(kubectl, "delete", "namespace/"+ns, "crd/widgets.example.com", "--wait=true", "--timeout=150s").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	_, err = cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	g.Expect(err).To(HaveOccurred(), "namespace %s is stuck", ns)
}

// TestForegroundAndOrphanDeletionWithKubectl covers the other rows of the README's teardown table
// against the strict operator, with the real garbage collector:
//   - foreground (`kubectl delete --cascade=foreground`, Argo CD's prune default): the garbage
//     collector would delete the operator's pods first, so the DELETE is refused (409) while
//     Widgets exist; deleting the Widgets first (as Argo CD does by live wave) then the operator
//     is allowed at once, with no retry;
//   - orphan: allowed; the finalizer holds the Deployment until the Widgets are gone, and the
//     orphaned ReplicaSet keeps the operator running meanwhile.
func TestForegroundAndOrphanDeletionWithKubectl(t *testing.T) {
	t.Parallel()
	startWidgetOperator(t)
	g := NewWithT(t)
	ctx := context.Background()

	ns := "td-foreground"
	applyYAML(t, operatorApp(ns, "Deployment", 2))
	waitSummary(t, ns, "instances 2/2 Released")
	out, err := exec.Command(kubectl, "delete", "-n", ns, "deployment/widget-operator", "--cascade=foreground", "--wait=false").CombinedOutput()
	g.Expect(err).To(HaveOccurred(), "a foreground deletion of the operator was allowed while its Widgets exist: %s", out)
	g.Expect(string(out)).To(ContainSubstring(`is deleted after group(s) instances (2 objects remain)`))
	start := time.Now()
	run(t, "delete", "-n", ns, "widgets", "--all", "--cascade=foreground", "--wait=true", "--timeout=60s")
	run(t, "delete", "-n", ns, "deployment/widget-operator", "--cascade=foreground", "--wait=true", "--timeout=60s")
	t.Logf("teardown time, foreground (Widgets, then the operator, as Argo CD orders it): %s", time.Since(start).Round(100*time.Millisecond))
	deleteNamespaceTimed(t, ns)

	ns = "td-orphan"
	applyYAML(t, operatorApp(ns, "Deployment", 2))
	waitSummary(t, ns, "instances 2/2 Released")
	start = time.Now()
	run(t, "delete", "-n", ns, "deployment/widget-operator", "--cascade=orphan", "--wait=false")
	g.Consistently(func() error {
		_, err := cs.AppsV1().Deployments(ns).Get(ctx, "widget-operator", metav1.GetOptions{})
		return err
	}).WithTimeout(1500*time.Millisecond).WithPolling(100*time.Millisecond).Should(Succeed(), "the finalizer must hold the Deployment while Widgets exist")
	run(t, "delete", "-n", ns, "widgets", "--all", "--wait=true", "--timeout=60s")
	g.Eventually(func() bool {
		_, err := cs.AppsV1().Deployments(ns).Get(ctx, "widget-operator", metav1.GetOptions{})
		return err != nil
	}).WithTimeout(60*time.Second).WithPolling(200*time.Millisecond).Should(BeTrue(), "the Deployment was not released once its Widgets were gone")
	t.Logf("teardown time, orphan (operator deleted, held 1.5 s, then the Widgets): %s", time.Since(start).Round(100*time.Millisecond))
	deleteNamespaceTimed(t, ns)
}

// TestUninstallFirstThenNamespaceDeletion: `wavegate uninstall` releases every finalizer and gate
// and removes the webhook configurations; after it nothing is ordered, so the custom resources are
// deleted before their operator by hand (as the README says) and the namespace then goes away with
// nothing of wavegate's holding it. Afterwards the webhook configurations are re-applied and their
// CA is injected at once (by the manager, or by cert-manager's cainjector with
// ENGINES=certmanager), as a reinstall does.
func TestUninstallFirstThenNamespaceDeletion(t *testing.T) {
	startWidgetOperator(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := "td-uninstall"
	applyYAML(t, operatorApp(ns, "Deployment", 2))
	waitSummary(t, ns, "instances 2/2 Released")
	t.Cleanup(func() { reinstallWebhooks(t) })

	out, err := exec.Command(filepath.Join(root, "bin", "wavegate"), "uninstall").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, "widget-operator", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Finalizers).To(BeEmpty(), "uninstall left a finalizer on the operator")
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "wavegate-validating-webhook-configuration", metav1.GetOptions{})
	g.Expect(err).To(HaveOccurred(), "uninstall left the DELETE check in place")

	run(t, "delete", "-n", ns, "widgets", "--all", "--wait=true", "--timeout=60s")
	deleteNamespaceTimed(t, ns)
}

// reinstallWebhooks re-applies the webhook configurations dev.sh applied (config/dev, or
// config/dev-certmanager) and waits until the webhook admits again (the manager, or cert-manager's
// cainjector, injects the CA into re-created configurations at once).
func reinstallWebhooks(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	run(t, "apply", "-k", devConfig())
	probe := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "reinstall-probe", Labels: map[string]string{keys.EnabledLabel: "true"}}}
	_, err := cs.CoreV1().Namespaces().Create(ctx, probe, metav1.CreateOptions{})
	g.Expect(client.IgnoreAlreadyExists(err)).To(Succeed())
	g.Eventually(func() map[string]string {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: map[string]string{keys.GroupLabel: "probe", keys.GroupOrderLabel: "1"}}}
		got, err := cs.CoreV1().ConfigMaps(probe.Name).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return nil
		}
		return got.Annotations
	}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(HaveKey(keys.ResolvedGroupAnnotation), "the webhook does not admit again")
	g.Expect(cs.CoreV1().Namespaces().Delete(ctx, probe.Name, metav1.DeleteOptions{})).To(Succeed())
}

// TestNamespaceDeletionWithAPodOnALaterGroupsClaim: an unlabeled Deployment (a backup job's, say)
// mounts the claim of the last group, data (order 2), and a Deployment of group operator (order 1)
// makes the namespace's sequence span two groups. The namespace controller deletes everything: the
// claim waits for the pod that mounts it (the real pvc-protection controller keeps it while a
// scheduled pod uses it), so if wavegate held that pod with the earliest group until the later
// groups are gone, neither would ever go, nor the namespace.
func TestNamespaceDeletionWithAPodOnALaterGroupsClaim(t *testing.T) {
	t.Parallel()
	ns := "td-claim"
	applyYAML(t, claimApp(ns, ""))
	t.Cleanup(func() { _ = exec.Command(kubectl, "delete", "pv", ns+"-0", "--wait=false").Run() })
	waitSummary(t, ns, "operator 1/1 Released, data 1/1 Released")
	waitBackupMounts(t, ns)
	took := deleteNamespaceTimed(t, ns)
	t.Logf("namespace deletion with a pod of no group on the last group's claim: %s", took.Round(100*time.Millisecond))
}

// TestCustomResourcesTheirParentOwnsHoldTheOperator: Widget w0 (group instances) owns Widget
// w0-part (its controller, as an operator's child resources are owned by the resource they were
// made for), which carries the same labels and the operator's finalizer, and whose cleanup takes
// 5 s. w0-part is no member in its own right, but the operator must outlive it as it does w0:
// with `kubectl delete -f` (background; the real garbage collector deletes w0-part once w0 is
// gone), and with the namespace's deletion (the namespace controller deletes both at once). Both
// would leave w0-part stuck on its finalizer if the operator went when w0 did.
func TestCustomResourcesTheirParentOwnsHoldTheOperator(t *testing.T) {
	t.Parallel()
	startWidgetOperator(t)
	for _, how := range []string{"delete-f", "namespace"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			ctx := context.Background()
			ns := "td-owned-" + how
			app := operatorApp(ns, "Deployment", 1)
			applyYAML(t, app)
			waitSummary(t, ns, "instances 1/1 Released")
			w0, err := dyn.Resource(widgetsGVR).Namespace(ns).Get(ctx, "w0", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			applyYAML(t, fmt.Sprintf(`apiVersion: example.com/v1
kind: Widget
metadata:
  name: w0-part
  namespace: %s
  labels: {wavegate.io/group: instances, wavegate.io/group-order: "2"}
  annotations: {example.com/cleanup-seconds: "5"}
  finalizers: [example.com/cleanup]
  ownerReferences: [{apiVersion: example.com/v1, kind: Widget, name: w0, uid: %s, controller: true, blockOwnerDeletion: true}]
`, ns, w0.GetUID()))
			part := func() error {
				_, err := dyn.Resource(widgetsGVR).Namespace(ns).Get(ctx, "w0-part", metav1.GetOptions{})
				return err
			}
			g.Expect(part()).To(Succeed())
			start := time.Now()
			if how == "namespace" {
				deleteNamespaceTimed(t, ns)
			} else {
				// Everything but the namespace, as `kubectl delete -f` of an app's manifests does.
				_, objects, _ := strings.Cut(app, "---\n")
				run(t, "delete", "-f", writeTemp(t, objects), "--wait=true", "--timeout=90s")
				g.Eventually(part).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).ShouldNot(Succeed(),
					"w0-part is left behind: stuck on its finalizer once the operator went")
				deleteNamespaceTimed(t, ns)
			}
			t.Logf("teardown with a 5 s cleanup of a Widget its parent owns (%s): %s", how, time.Since(start).Round(100*time.Millisecond))
		})
	}
}

// claimApp is an opted-in namespace with claim data (group data, order 2) on a PersistentVolume
// made for it, and Deployment backup, whose pod mounts the claim, in group backupGroup (order 1),
// or in no group with a Deployment a-operator of group operator (order 1) beside it when
// backupGroup is "".
func claimApp(ns, backupGroup string) string {
	backupLabels, operator := "", ""
	if backupGroup != "" {
		backupLabels = fmt.Sprintf("\n  labels: {wavegate.io/group: %s, wavegate.io/group-order: \"1\"}", backupGroup)
	} else {
		// Named so that its pods come first: the namespace controller deletes pods as one
		// collection in name order, and stops at the first it is refused (the operator's).
		operator = "---\n" + groupDeployment(ns, "a-operator", "operator", 1)
	}
	return volumeFor(ns, "data") + fmt.Sprintf(`---
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s, labels: {wavegate.io/enabled: "true"}}
%[3]s---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: %[1]s
  labels: {wavegate.io/group: data, wavegate.io/group-order: "2"}
spec:
  storageClassName: ""
  volumeName: %[1]s-0
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: backup
  namespace: %[1]s%[2]s
spec:
  selector: {matchLabels: {app: backup}}
  template:
    metadata: {labels: {app: backup}}
    spec:
      containers: [{name: c, image: backup, volumeMounts: [{name: data, mountPath: /data}]}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
`, ns, backupLabels, operator)
}

// waitBackupMounts waits until the backup pod runs, and checks that its claim carries the
// pvc-protection finalizer that keeps it while the pod exists.
func waitBackupMounts(t *testing.T, ns string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Eventually(func() error {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=backup"})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return fmt.Errorf("the backup pod is not running: %v", err)
		}
		return nil
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pvc.Finalizers).To(ContainElement("kubernetes.io/pvc-protection"), "nothing would keep the claim for its pod")
}

// TestDeletingAWorkloadThatMountsALaterGroupsClaim: Deployment backup (group backup, order 1)
// mounts claim data (group data, order 2), and `kubectl delete -f` deletes both (background). The
// claim waits for the pod (the real pvc-protection controller), the pod for the Deployment (the
// real garbage collector), so if wavegate held the Deployment until the claim were gone, none of
// them would ever go.
func TestDeletingAWorkloadThatMountsALaterGroupsClaim(t *testing.T) {
	t.Parallel()
	ns := "td-mounts"
	app := claimApp(ns, "backup")
	applyYAML(t, app)
	t.Cleanup(func() { _ = exec.Command(kubectl, "delete", "pv", ns+"-0", "--wait=false").Run() })
	waitSummary(t, ns, "backup 1/1 Released, data 1/1 Released")
	waitBackupMounts(t, ns)
	start := time.Now()
	docs := strings.Split(app, "---\n")
	run(t, "delete", "-f", writeTemp(t, strings.Join(docs[2:], "---\n")), "--wait=true", "--timeout=60s") // all but the PV and the namespace
	t.Logf("kubectl delete -f of a workload and the later group's claim it mounts: %s", time.Since(start).Round(100*time.Millisecond))
	deleteNamespaceTimed(t, ns)
}

// TestClaimsAStatefulSetKeepsHoldNothing: a StatefulSet of group data (order 2) whose
// volumeClaimTemplates carry the group's labels (kustomize's commonLabels put them there, and many
// charts do), and a Deployment of group operator (order 1). The real StatefulSet controller
// creates claim data-db-0 with those labels and keeps it when the StatefulSet goes (its retention
// policy, Retain by default): as a member it would hold the operator for good, and `kubectl delete
// -f` of the app would never end. It is no member: admission marks it as a template's claim.
func TestClaimsAStatefulSetKeepsHoldNothing(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := "td-retained"
	objects := groupDeployment(ns, "operator", "operator", 1) + fmt.Sprintf(`---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: %[1]s
  labels: {wavegate.io/group: data, wavegate.io/group-order: "2"}
spec:
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: db, volumeMounts: [{name: data, mountPath: /data}]}]
  volumeClaimTemplates:
  - metadata:
      name: data
      labels: {wavegate.io/group: data, wavegate.io/group-order: "2"}
    spec:
      storageClassName: ""
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
`, ns)
	applyYAML(t, volumeFor(ns, "data-db-0")+fmt.Sprintf(`---
apiVersion: v1
kind: Namespace
metadata: {name: %s, labels: {wavegate.io/enabled: "true"}}
---
`, ns)+objects)
	t.Cleanup(func() { _ = exec.Command(kubectl, "delete", "pv", ns+"-0", "--wait=false").Run() })
	g.Eventually(func() error {
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil || pod.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("db-0 is not running: %v", err)
		}
		return nil
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	claim, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(claim.Labels).To(HaveKeyWithValue(keys.GroupLabel, "data"))
	g.Expect(claim.Annotations).To(HaveKey(keys.ClaimTemplateAnnotation))
	g.Expect(claim.Finalizers).NotTo(ContainElement(keys.TeardownFinalizer))
	waitSummary(t, ns, "operator 1/1 Released, data 1/1 Released")

	start := time.Now()
	run(t, "delete", "-f", writeTemp(t, objects), "--wait=true", "--timeout=60s")
	t.Logf("kubectl delete -f of an operator and a StatefulSet whose claim stays: %s", time.Since(start).Round(100*time.Millisecond))
	_, err = cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "the StatefulSet's claim is retained")
	deleteNamespaceTimed(t, ns)
}

// groupDeployment is a one-pod Deployment of group group at order order in namespace ns.
func groupDeployment(ns, name, group string, order int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[2]s
  namespace: %[1]s
  labels: {wavegate.io/group: %[3]s, wavegate.io/group-order: "%[4]d"}
spec:
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec:
      containers: [{name: c, image: %[2]s}]
`, ns, name, group, order)
}

// volumeFor is a PersistentVolume <ns>-0, bound ahead to claim ns/claim (a hostPath: the kwok node
// mounts nothing).
func volumeFor(ns, claim string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: %[1]s-0}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  hostPath: {path: /mnt/%[1]s-0}
  claimRef: {namespace: %[1]s, name: %[2]s}
`, ns, claim)
}
