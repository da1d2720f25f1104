//go:build e2e

// Package e2e proves wavegate on the local cluster (`make dev-up`: a real control plane with kwok
// nodes, wavegate's manager, wait-Job pods executed for real) with the clients people use: the
// kubectl binary. Run with `make test-e2e`.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"wavegate.io/wavegate/pkg/keys"
)

var (
	root    string
	kubectl string
	cs      kubernetes.Interface
	dyn     dynamic.Interface
)

func TestMain(m *testing.M) {
	wd, _ := os.Getwd()
	root = filepath.Join(wd, "..", "..")
	kubectl = filepath.Join(os.Getenv("KUBE_BIN"), "kubectl")
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic("KUBECONFIG must name the local cluster's kubeconfig (make test-e2e): " + err.Error())
	}
	cs = kubernetes.NewForConfigOrDie(cfg)
	dyn = dynamic.NewForConfigOrDie(cfg)
	// The manager runs with its installed roles (dev.sh): like a user, the suite grants it the stand-in
	// operator's custom resource kind, or Widgets would be no group's members.
	if out, err := exec.Command(kubectl, "apply", "-f", filepath.Join(root, "config", "samples", "aggregate-widgets.yaml")).CombinedOutput(); err != nil {
		panic(fmt.Sprintf("granting wavegate access to Widgets: %v: %s", err, out))
	}
	os.Exit(m.Run())
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(kubectl, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func example(name string) string { return filepath.Join(root, "examples", name) }

// groupOrder is the order of each group of examples/shop.
var groupOrder = map[string]int{"database": 1, "migrate": 2, "web": 3}

// TestOrderedInstallAndTeardownWithKubectl applies the three-group app in one `kubectl apply -f`
// and proves from the cluster's own timestamps that no pod of a group was released to the scheduler
// before every earlier group's wait Job had completed; then `kubectl delete -f` (namespace included) leaves
// nothing behind.
func TestOrderedInstallAndTeardownWithKubectl(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	run(t, "apply", "-f", example("shop"))
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "-f", example("shop"), "--ignore-not-found", "--wait=false").Run()
	})
	checkReleaseOrder(t, "shop")

	run(t, "delete", "-f", example("shop"), "--wait=true", "--timeout=90s")
	_, err := cs.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	g.Expect(err).To(HaveOccurred(), "namespace shop is stuck")
}

// checkReleaseOrder waits until the sequence of namespace ns is Ready, then proves from the
// cluster's own records that no pod of examples/shop's groups in
// namespace ns was released to the scheduler before every earlier group's waiter had succeeded.
func checkReleaseOrder(t *testing.T, ns string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	// Ready, and no waiter still running: a client that applies again (a GitOps engine's second
	// sync, say) may start a new revision's waiter just after the sequence was Ready.
	g.Eventually(func(g Gomega) {
		out, _ := exec.Command(kubectl, "get", "sequence", ns, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}").Output()
		g.Expect(string(out)).To(Equal("True"), "sequence %s is not Ready", ns)
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: keys.WaitJobLabel + "=true"})
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range pods.Items {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), "waiter %s", p.Name)
		}
	}).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	// When did each group's wait Job complete, and when was each member pod released to the scheduler?
	jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: keys.WaitJobLabel + "=true"})
	g.Expect(err).NotTo(HaveOccurred())
	// Wait Jobs start suspended until their waiter's ServiceAccount and Roles exist: the real Job
	// controller never had a waiter pod refused (it would have retried a second or more later).
	// Without the suspension this fails only when the Job controller wins the race against the
	// waiter-RBAC controller (it did on a fresh cluster in bench runs, not in a trial of this test);
	// the order itself is pinned by pkg/sequence's TestWaitJobResumesAfterItsAccess.
	refused, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Job,reason=FailedCreate"})
	g.Expect(err).NotTo(HaveOccurred())
	for _, e := range refused.Items {
		g.Expect(e.InvolvedObject.Name).NotTo(HavePrefix("wavegate-wait-"), "the Job controller could not create a waiter pod: %s", e.Message)
	}
	released := map[string]time.Time{}
	for _, j := range jobs.Items {
		group := j.Labels[keys.WaitGroupLabel]
		if c := waiterFinished(g, j); released[group].IsZero() || c.After(released[group]) {
			released[group] = c // the last revision's waiter is the barrier
		}
	}
	g.Expect(released).To(HaveKey("database"))
	g.Expect(released).To(HaveKey("migrate"))
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: keys.GroupLabel})
	g.Expect(err).NotTo(HaveOccurred())
	checked := 0
	for _, p := range pods.Items {
		g.Expect(p.Spec.NodeName).NotTo(BeEmpty(), "pod %s was never scheduled", p.Name)
		scheduled := ungatedAt(p)
		g.Expect(scheduled.IsZero()).To(BeFalse(), "pod %s was never gated and released by wavegate", p.Name)
		for group, at := range released {
			if groupOrder[group] < groupOrder[p.Labels[keys.GroupLabel]] {
				// Container finish times have one-second resolution: the same second is allowed.
				g.Expect(scheduled.Add(time.Second).After(at)).To(BeTrue(),
					"pod %s of group %s was released at %s, before group %s was released at %s", p.Name, p.Labels[keys.GroupLabel], scheduled, group, at)
				checked++
			}
		}
	}
	g.Expect(checked).To(BeNumerically(">=", 3))
}

// waiterFinished returns when a wait Job's waiter found its group ready: the mark it wrote on its
// Job, which wavegate releases the next group on, or, for a Job without one, when its pod exited.
// Either way the pod, run for real, must succeed; it is waited for, because a kubelet (and the pod
// runner) reports the exit only at its next PLEG relist, up to a second after the mark and so
// after the next group's release.
func waiterFinished(g Gomega, j batchv1.Job) time.Time {
	var exited time.Time
	g.Eventually(func(g Gomega) {
		pods, err := cs.CoreV1().Pods(j.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + j.Name})
		g.Expect(err).NotTo(HaveOccurred())
		if len(pods.Items) == 0 && j.Status.CompletionTime != nil {
			exited = j.Status.CompletionTime.Time // an old revision's Job whose pod is already gone
			return
		}
		g.Expect(pods.Items).To(HaveLen(1))
		p := pods.Items[0]
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), "wait Job pods run for real and succeed")
		g.Expect(p.Status.ContainerStatuses).To(HaveLen(1))
		term := p.Status.ContainerStatuses[0].State.Terminated
		g.Expect(term).NotTo(BeNil())
		exited = term.FinishedAt.Time
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	if at, err := time.Parse(time.RFC3339Nano, j.Annotations[keys.WaiterReadyAnnotation]); err == nil {
		return at
	}
	return exited
}

// rewriteNamespace copies a manifest into the test's directory with another namespace.
func rewriteNamespace(t *testing.T, path, ns string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(out, []byte(strings.ReplaceAll(string(b), "namespace: shop", "namespace: "+ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// ungatedAt returns when wavegate removed a pod's scheduling gate, from the annotation it writes in
// the same patch. A gated pod cannot be bound, so the pod was scheduled after this time; the zero
// time means wavegate never ungated it.
func ungatedAt(p corev1.Pod) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, p.Annotations[keys.ReleasedAtAnnotation])
	return t
}

// TestServerSideDryRunCreatesNothing: `kubectl apply --dry-run=server` of the whole example
// returns the mutation and creates no Job, access, Sequence or anything else.
func TestServerSideDryRunCreatesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	run(t, "create", "namespace", "dry")
	run(t, "label", "namespace", "dry", keys.EnabledLabel+"=true")
	t.Cleanup(func() { _ = exec.Command(kubectl, "delete", "namespace", "dry", "--wait=false").Run() })
	// Opted in, the namespace gets its waiter's Role, without rules, and its RoleBinding, before
	// any wait Job (the manager writes them as its ServiceAccount, under config/rbac's policy).
	g.Eventually(func(g Gomega) {
		_, err := cs.RbacV1().Roles("dry").Get(ctx, "wavegate-waiter", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = cs.RbacV1().RoleBindings("dry").Get(ctx, "wavegate-waiter", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}).WithTimeout(30*time.Second).Should(Succeed(), "an opted-in namespace without wait Jobs has no waiter Role and RoleBinding")
	// The examples name their namespace: feed them through sed-free kubectl by overriding it.
	web := rewriteNamespace(t, filepath.Join(example("shop"), "web.yaml"), "dry")
	out := run(t, "apply", "--dry-run=server", "-o", "json", "-f", web)
	var d struct {
		Metadata struct{ Annotations map[string]string }
	}
	g.Expect(json.Unmarshal([]byte(out), &d)).To(Succeed())
	g.Expect(d.Metadata.Annotations).To(HaveKeyWithValue(keys.ArgoCDSyncWaveAnnotation, "300"))
	for _, f := range []string{"database.yaml", "migrate.yaml", "web.yaml"} {
		run(t, "apply", "--dry-run=server", "-f", rewriteNamespace(t, filepath.Join(example("shop"), f), "dry"))
	}
	jobs, err := cs.BatchV1().Jobs("dry").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(jobs.Items).To(BeEmpty())
	// The namespace's waiter Role is still without rules: no wait Job needed any.
	roles, err := cs.RbacV1().Roles("dry").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(roles.Items).NotTo(BeEmpty())
	for _, ro := range roles.Items {
		g.Expect(ro.Rules).To(BeEmpty(), "Role %s grants access after a dry run", ro.Name)
	}
	seq, err := dyn.Resource(schema.GroupVersionResource{Group: "wavegate.io", Version: "v1alpha1", Resource: "sequences"}).
		Get(ctx, "dry", metav1.GetOptions{})
	g.Expect(err).To(HaveOccurred(), "a Sequence was created: %v", seq)
}

// TestOperatorTeardownWithKubectl: an operator, its CRD and its custom resources deleted at once
// with `kubectl delete -f`; the stand-in operator (bin/widget-operator) finalizes Widgets only
// while its pods run. Nothing may be left.
func TestOperatorTeardownWithKubectl(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	installWidgets(t)

	start := time.Now()
	run(t, "delete", "-f", filepath.Join(example("widgets"), "app.yaml"), "--wait=true", "--timeout=90s")
	t.Logf("teardown time, background (kubectl delete -f, operator + 2 Widgets + namespace): %s", time.Since(start).Round(100*time.Millisecond))
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	list, err := dyn.Resource(widgets).List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list.Items).To(BeEmpty(), "Widgets were stranded")
	run(t, "delete", "-f", filepath.Join(example("widgets"), "crd.yaml"), "--wait=true", "--timeout=60s")
}

// installWidgets starts the stand-in operator (bin/widget-operator: it finalizes Widgets only while
// its pods run) and applies examples/widgets, then waits until the sequence is released.
func installWidgets(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	op := exec.Command(filepath.Join(root, "bin", "widget-operator"), "--kubeconfig", os.Getenv("KUBECONFIG"))
	g.Expect(op.Start()).To(Succeed())
	t.Cleanup(func() { _ = op.Process.Kill(); _, _ = op.Process.Wait() })
	applyWidgetCRD(t)
	run(t, "apply", "-f", filepath.Join(example("widgets"), "app.yaml"))
	g.Eventually(func() string {
		out, _ := exec.Command(kubectl, "get", "sequence", "widgets", "-o", "jsonpath={.status.summary}").Output()
		return string(out)
	}).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(ContainSubstring("instances 2/2 Released"))
}
