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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
)

var (
	root    string
	kubectl string
	config  *rest.Config
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
	config = cfg
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
// and proves from the order of the cluster's own writes that no pod of a group was released to the scheduler
// before every earlier group's wait Job had completed; then `kubectl delete -f` (namespace included) leaves
// nothing behind.
func TestOrderedInstallAndTeardownWithKubectl(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	log := recordReleases(t, "shop")
	run(t, "apply", "-f", example("shop"))
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "-f", example("shop"), "--ignore-not-found", "--wait=false").Run()
	})
	checkReleaseOrder(t, "shop", log)

	run(t, "delete", "-f", example("shop"), "--wait=true", "--timeout=90s")
	_, err := cs.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	g.Expect(err).To(HaveOccurred(), "namespace shop is stuck")
}

// checkReleaseOrder waits until the sequence of namespace ns is Ready, then proves from the order
// of the cluster's writes (log, recorded from before the apply) that no pod of examples/shop's
// groups in namespace ns was released to the scheduler before every earlier group's waiter had
// found its group ready.
func checkReleaseOrder(t *testing.T, ns string, log *releaseLog) {
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
	barrier := log.barriers(g, jobs.Items)
	g.Expect(barrier).To(HaveKey("database"))
	g.Expect(barrier).To(HaveKey("migrate"))
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: keys.GroupLabel})
	g.Expect(err).NotTo(HaveOccurred())
	checked := 0
	for _, p := range pods.Items {
		g.Expect(p.Spec.NodeName).NotTo(BeEmpty(), "pod %s was never scheduled", p.Name)
		released, gated := log.release(g, p)
		g.Expect(gated).To(BeTrue(), "pod %s was never gated and released by wavegate", p.Name)
		for group, done := range barrier {
			if groupOrder[group] < groupOrder[p.Labels[keys.GroupLabel]] {
				g.Expect(released).To(BeNumerically(">", done),
					"pod %s of group %s was released at revision %d, before group %s's waiter was done at revision %d", p.Name, p.Labels[keys.GroupLabel], released, group, done)
				checked++
			}
		}
	}
	g.Expect(checked).To(BeNumerically(">=", 3))
}

// waiterSucceeded checks that a wait Job's waiter pod, run for real, succeeded. It is waited for,
// because a kubelet (and the pod runner) reports the exit only at its next PLEG relist, up to a
// second after the waiter's mark and so after the next group's release. A Job of an old revision
// whose pod is already gone must have completed.
func waiterSucceeded(g Gomega, j batchv1.Job) {
	g.Eventually(func(g Gomega) {
		pods, err := cs.CoreV1().Pods(j.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + j.Name})
		g.Expect(err).NotTo(HaveOccurred())
		if len(pods.Items) == 0 && j.Status.CompletionTime != nil {
			return
		}
		g.Expect(pods.Items).To(HaveLen(1))
		p := pods.Items[0]
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), "wait Job pods run for real and succeed")
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// releaseLog records, from watches of some namespaces started before an apply, the revision of the
// write that released each pod (removed wavegate's gate, or created the pod without one) and of the
// first write that showed each wait Job's waiter done: the mark it writes on its Job
// (keys.WaiterReadyAnnotation), which wavegate releases the next group on, or its pod's success,
// the fallback. A resourceVersion is the etcd revision of an object's last write, and the local
// cluster has one etcd: revisions order writes across objects exactly, where timestamps come from
// different clocks, some with a second's resolution.
type releaseLog struct {
	mu       sync.Mutex
	gated    map[string]bool   // namespace/pod: seen with the gate
	released map[string]uint64 // namespace/pod
	done     map[string]uint64 // namespace/job
	created  map[string]bool   // namespace/job: created after the log started
}

// recordReleases starts a releaseLog of the pods and wait Jobs of namespaces (which need not exist
// yet), until the test ends.
func recordReleases(t *testing.T, namespaces ...string) *releaseLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l := &releaseLog{gated: map[string]bool{}, released: map[string]uint64{}, done: map[string]uint64{}, created: map[string]bool{}}
	for _, ns := range namespaces {
		pods := watchNamespacePods(ctx, t, ns)
		go func() {
			defer pods.Stop()
			for ev := range pods.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted {
					l.pod(p)
				}
			}
		}()
		jobs := watchNamespaceJobs(ctx, t, ns)
		go func() {
			defer jobs.Stop()
			for ev := range jobs.ResultChan() {
				if j, ok := ev.Object.(*batchv1.Job); ok && ev.Type != watch.Deleted {
					if ev.Type == watch.Added {
						l.mu.Lock()
						l.created[j.Namespace+"/"+j.Name] = true
						l.mu.Unlock()
					}
					if _, err := time.Parse(time.RFC3339Nano, j.Annotations[keys.WaiterReadyAnnotation]); err == nil {
						l.waiterDone(j.Namespace, j.Name, j.ResourceVersion)
					}
				}
			}
		}()
	}
	return l
}

func (l *releaseLog) pod(p *corev1.Pod) {
	if job := p.Labels["job-name"]; p.Labels[keys.WaitJobLabel] == "true" && job != "" && p.Status.Phase == corev1.PodSucceeded {
		l.waiterDone(p.Namespace, job, p.ResourceVersion)
	}
	rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
	key := p.Namespace + "/" + p.Name
	l.mu.Lock()
	defer l.mu.Unlock()
	if sequence.HasGate(p) {
		l.gated[key] = true
	} else if l.released[key] == 0 {
		l.released[key] = rv
	}
}

func (l *releaseLog) waiterDone(ns, job, resourceVersion string) {
	rv, _ := strconv.ParseUint(resourceVersion, 10, 64)
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.done[ns+"/"+job]; cur == 0 || rv < cur {
		l.done[ns+"/"+job] = rv
	}
}

// release returns the revision that released a pod, once the watch has seen it, and whether the pod
// was ever seen gated.
func (l *releaseLog) release(g Gomega, p corev1.Pod) (uint64, bool) {
	key := p.Namespace + "/" + p.Name
	var rv uint64
	var gated bool
	l.await(g, func() bool { rv, gated = l.released[key], l.gated[key]; return rv > 0 }, "the watch never saw pod %s released", key)
	return rv, gated
}

// await waits until seen, called under the log's lock, is true.
func (l *releaseLog) await(g Gomega, seen func() bool, msg string, args ...any) {
	g.Eventually(func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return seen()
	}).WithTimeout(10*time.Second).Should(BeTrue(), append([]any{msg}, args...)...)
}

// barriers returns, per group, the revision at which the last of its wait Jobs was done (the last
// revision's waiter is the barrier). Each Job's waiter must have succeeded, and the log must have
// seen each Job created after it started done; Jobs created before (an earlier revision's) count
// only if it saw them done.
func (l *releaseLog) barriers(g Gomega, jobs []batchv1.Job) map[string]uint64 {
	out := map[string]uint64{}
	for _, j := range jobs {
		waiterSucceeded(g, j)
		key := j.Namespace + "/" + j.Name
		var rv uint64
		l.await(g, func() bool { rv = l.done[key]; return rv > 0 || !l.created[key] }, "the watch never saw the waiter of %s done", key)
		if group := j.Labels[keys.WaitGroupLabel]; rv > out[group] {
			out[group] = rv
		}
	}
	return out
}

// watchNamespaceJobs watches the wait Jobs of a namespace from now on (see watchFromNow).
func watchNamespaceJobs(ctx context.Context, t testing.TB, ns string) watch.Interface {
	selected := func(o metav1.ListOptions) metav1.ListOptions { o.LabelSelector = keys.WaitJobLabel + "=true"; return o }
	return watchFromNow(ctx, t,
		func(ctx context.Context, o metav1.ListOptions) (string, error) {
			list, err := cs.BatchV1().Jobs(ns).List(ctx, selected(o))
			if err != nil {
				return "", err
			}
			return list.ResourceVersion, nil
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.BatchV1().Jobs(ns).Watch(ctx, selected(o))
		})
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

// TestServerSideDryRunCreatesNothing: `kubectl apply --dry-run=server` of the whole example
// returns the mutation and creates no Job, access, Sequence or anything else.
func TestServerSideDryRunCreatesNothing(t *testing.T) {
	t.Parallel()
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
	waitSummary(t, "widgets", "instances 2/2 Released")
}
