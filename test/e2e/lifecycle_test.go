//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
)

func sequenceSummary() string { return sequenceSummaryOf("shop") }

// TestUpgradeOrderWithKubectl: with the app released, one command changes the database image and
// the web image. The web's new pods (a new ReplicaSet) are scheduled only after the database's new
// revision is ready; the old web pods keep serving meanwhile.
func TestUpgradeOrderWithKubectl(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	run(t, "apply", "-f", example("shop"))
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "-f", example("shop"), "--wait=true", "--timeout=90s").Run()
	})
	g.Eventually(sequenceSummary).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).
		Should(Equal("database 2/2 Released, migrate 1/1 Released, web 1/1 Released"))
	oldWeb, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	g.Expect(err).NotTo(HaveOccurred())

	log := recordReleases(t, "shop")
	run(t, "patch", "-n", "shop", "statefulset/db", "--type=json", `-p=[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"postgres:17"}]`)
	run(t, "patch", "-n", "shop", "deployment/web", "--type=json", `-p=[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"shop/web:2"}]`)

	g.Eventually(sequenceSummary).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).
		Should(Equal("database 2/2 Released, migrate 1/1 Released, web 1/1 Released"))
	// The database's newest wait Job is the barrier the new web pods waited for.
	jobs, err := cs.BatchV1().Jobs("shop").List(ctx, metav1.ListOptions{LabelSelector: keys.WaitGroupLabel + "=database"})
	g.Expect(err).NotTo(HaveOccurred())
	released := log.barriers(g, jobs.Items)["database"]
	g.Expect(released).NotTo(BeZero(), "the log saw no waiter of the database's new revision done")
	pods, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	g.Expect(err).NotTo(HaveOccurred())
	newPods, gatedPods := 0, 0
	for _, p := range pods.Items {
		if p.Spec.Containers[0].Image != "shop/web:2" {
			continue
		}
		newPods++
		// The first pod of the new template is gated and released; later pods of the same template
		// (the rolling update's next ones) start without a gate, as the template is then cleared:
		// they were created after the release. Either way the write that let the pod be scheduled
		// (the gate's removal, or the pod's creation) came after the database's waiter was done.
		at, gated := log.release(g, p)
		if gated {
			gatedPods++
		}
		g.Expect(at).To(BeNumerically(">", released),
			"new web pod %s was released at revision %d, before the database's new revision was released at revision %d", p.Name, at, released)
	}
	t.Logf("%d new web pods, %d of them gated and released by wavegate", newPods, gatedPods)
	g.Expect(newPods).To(BeNumerically(">", 0))
	// The old pods served until the new ones were ready: they were never deleted before that.
	for _, p := range oldWeb.Items {
		g.Expect(p.Spec.SchedulingGates).To(BeEmpty())
	}
}

// TestTimeoutPathWithKubectl: a group that never becomes ready (a custom resource nobody
// reconciles) times out through the Job controller's activeDeadlineSeconds; the group is TimedOut
// with a Warning, and the later group stays gated.
func TestTimeoutPathWithKubectl(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	run(t, "apply", "-f", example("widgets")+"/crd.yaml")
	run(t, "wait", "--for", "condition=Established", "crd/widgets.example.com", "--timeout=60s")
	manifest := `apiVersion: v1
kind: Namespace
metadata: {name: slow, labels: {wavegate.io/enabled: "true"}}
---
apiVersion: wavegate.io/v1alpha1
kind: WavePolicy
metadata: {name: slow}
spec:
  groups:
  - {name: slow-backend, order: 1, timeout: 5s}
  - {name: slow-frontend, order: 2}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: never-ready, namespace: slow, labels: {wavegate.io/group: slow-backend}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: frontend, namespace: slow, labels: {wavegate.io/group: slow-frontend}}
spec:
  replicas: 1
  selector: {matchLabels: {app: frontend}}
  template:
    metadata: {labels: {app: frontend}}
    spec:
      containers: [{name: web, image: frontend:1}]
`
	path := t.TempDir() + "/slow.yaml"
	g.Expect(os.WriteFile(path, []byte(manifest), 0o600)).To(Succeed())
	// The policy first, so that the groups it defines are known when the members arrive.
	g.Eventually(func() error { return exec.Command(kubectl, "apply", "-f", path).Run() }).WithTimeout(30 * time.Second).Should(Succeed())
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "-f", path, "--wait=true", "--timeout=60s").Run()
		_ = exec.Command(kubectl, "delete", "-f", example("widgets")+"/crd.yaml", "--wait=false").Run()
	})
	waitSummary(t, "slow", "slow-backend 0/1 TimedOut")
	pods, err := cs.CoreV1().Pods("slow").List(ctx, metav1.ListOptions{LabelSelector: "app=frontend"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.Items).NotTo(BeEmpty())
	for _, p := range pods.Items {
		g.Expect(gated(p)).To(BeTrue(), "frontend pod %s was released although its predecessor timed out", p.Name)
	}
	evs := run(t, "get", "events.events.k8s.io", "-n", "slow", "-o", "jsonpath={range .items[*]}{.type} {.reason}{\"\\n\"}{end}")
	g.Expect(evs).To(ContainSubstring("Warning GroupTimedOut"))
}

func gated(p corev1.Pod) bool { return sequence.HasGate(&p) }

// expectReleased checks that namespace ns has pods labeled app=<app>, and that none is gated.
func expectReleased(g Gomega, ns, app string) {
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.Items).NotTo(BeEmpty())
	for _, p := range pods.Items {
		g.Expect(gated(p)).To(BeFalse(), "pod %s is still gated", p.Name)
	}
}

// TestEvictedWaiterIsReplaced: a group's waiter pod evicted while it waits (a node drain) is
// replaced by the real Job controller without counting as a failure (the wait Job's pod failure
// policy ignores DisruptionTarget), and the new waiter releases the next group once the group is
// ready. The local cluster's pod runner plays the kubelet: it stops the evicted waiter with SIGTERM,
// reports its exit with the eviction's condition kept, then removes the pod.
func TestEvictedWaiterIsReplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	testWaiterReplaced(t, "evict", 0, func(g Gomega, p corev1.Pod) {
		g.Expect(cs.CoreV1().Pods(p.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})).To(Succeed())
	})
}

// TestDeletedWaiterIsRetried: a waiter pod deleted by hand (no disruption condition: as a crash
// would) counts as one failure of the wait Job, within its backoffLimit, and the real Job
// controller starts a new waiter after its back-off; the group is released as usual.
func TestDeletedWaiterIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	testWaiterReplaced(t, "retry", 1, func(g Gomega, p corev1.Pod) {
		g.Expect(cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})).To(Succeed())
	})
}

// testWaiterReplaced runs a setup group (a Job that completes when the test says) and an app group
// in namespace ns, stops the setup group's running waiter with stop, and checks that the real Job
// controller replaces it, that the app stays gated until the setup Job completes, and that the
// wait Job completes with wantFailed failed pods.
func testWaiterReplaced(t *testing.T, ns string, wantFailed int32, stop func(Gomega, corev1.Pod)) {
	g := NewWithT(t)
	ctx := context.Background()
	ready := filepath.Join(t.TempDir(), "ready")
	// The setup Job completes once the test creates the file.
	manifest := setupThenApp(ns, fmt.Sprintf("until [ -e %s ]; do sleep 0.2; done", ready))
	path := writeTemp(t, manifest)
	run(t, "apply", "-f", path)
	t.Cleanup(func() { _ = exec.Command(kubectl, "delete", "namespace", ns, "--wait=true", "--timeout=90s").Run() })

	// The setup group's waiter is running: it waits for the Job, which waits for the file.
	waiterPod := func(g Gomega) corev1.Pod {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: keys.WaitGroupLabel + "=setup"})
		g.Expect(err).NotTo(HaveOccurred())
		var running []corev1.Pod
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running = append(running, p)
			}
		}
		g.Expect(running).To(HaveLen(1))
		return running[0]
	}
	var first corev1.Pod
	g.Eventually(func(g Gomega) { first = waiterPod(g) }).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	job := first.Labels["job-name"]
	g.Expect(job).NotTo(BeEmpty())

	stop(g, first)
	// A new waiter replaces it.
	g.Eventually(func(g Gomega) {
		g.Expect(waiterPod(g).UID).NotTo(Equal(first.UID))
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Eventually(func() (*corev1.Pod, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return p, err
	}).WithTimeout(time.Minute).Should(BeNil(), "the stopped waiter pod was never removed")
	// Still gated: the setup Job has not completed.
	expectAppGated(g, ns, "before the setup group was ready")

	g.Expect(os.WriteFile(ready, nil, 0o600)).To(Succeed())
	g.Eventually(func(g Gomega) {
		j, err := cs.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(sequence.StateOf(j)).To(Equal(sequence.JobComplete))
		g.Expect(j.Status.Failed).To(Equal(wantFailed), "failed waiter pods counted by the Job controller")
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) { expectReleased(g, ns, "app") }).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// TestReclosedGroupTimesOutFromItsReopening: a group whose waiter was armed when it opened closes
// again when an earlier group changes (a new member that is not ready yet); the real Job controller
// must not time it out while it waits for that earlier group longer than its own timeout. Once the
// earlier group is ready again the group's timeout counts afresh, and the group is released when
// its members are ready.
func TestReclosedGroupTimesOutFromItsReopening(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := "reclose"
	dir := t.TempDir()
	exitJob := func(name, group, file string) string {
		return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata: {name: %[2]s, namespace: %[1]s, labels: {wavegate.io/group: %[3]s}}
spec:
  backoffLimit: 0
  template:
    metadata: {labels: {dev.wavegate.io/exec: "true"}}
    spec:
      restartPolicy: Never
      containers: [{name: run, image: run:1, command: [sh, -c, "until [ -e %[4]s ]; do sleep 0.2; done"]}]
`, ns, name, group, filepath.Join(dir, file))
	}
	base := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s, labels: {wavegate.io/enabled: "true"}}
---
apiVersion: wavegate.io/v1alpha1
kind: WavePolicy
metadata: {name: reclose}
spec:
  groups:
  - {name: reclose-a, order: 1}
  - {name: reclose-b, order: 2, timeout: 8s}
  - {name: reclose-c, order: 3}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: %[1]s, labels: {wavegate.io/group: reclose-a}}
---
%[2]s---
%[3]s`, ns, exitJob("b", "reclose-b", "b-ready"), oneReplicaDeployment(ns, "c", "reclose-c"))
	path := writeTemp(t, base)
	g.Eventually(func() error { return exec.Command(kubectl, "apply", "-f", path).Run() }).WithTimeout(30 * time.Second).Should(Succeed())
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "namespace", ns, "--wait=true", "--timeout=90s").Run()
		_ = exec.Command(kubectl, "delete", "wavepolicy", "reclose", "--wait=false").Run()
	})
	waitJobOf := func(g Gomega, group string) *batchv1.Job {
		jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: keys.WaitGroupLabel + "=" + group})
		g.Expect(err).NotTo(HaveOccurred())
		var live []batchv1.Job
		for _, j := range jobs.Items {
			if j.DeletionTimestamp == nil {
				live = append(live, j)
			}
		}
		g.Expect(live).To(HaveLen(1))
		return &live[0]
	}
	// b is open (a, a ConfigMap, is ready at once), and its waiter armed with b's timeout.
	var armed *batchv1.Job
	g.Eventually(func(g Gomega) {
		armed = waitJobOf(g, "reclose-b")
		g.Expect(armed.Spec.ActiveDeadlineSeconds).NotTo(BeNil())
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())

	// a gains a member that is not ready: b closes again, and its waiter loses its deadline.
	run(t, "apply", "-f", writeTemp(t, exitJob("a-more", "reclose-a", "a-ready")))
	g.Eventually(func(g Gomega) {
		j := waitJobOf(g, "reclose-b")
		g.Expect(j.UID).To(Equal(armed.UID))
		g.Expect(j.Spec.ActiveDeadlineSeconds).To(BeNil())
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	// Longer than b's timeout: the Job controller does not fail b's waiter.
	g.Consistently(func(g Gomega) {
		j := waitJobOf(g, "reclose-b")
		g.Expect(sequence.StateOf(j)).To(Equal(sequence.JobRunning))
	}).WithTimeout(12 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

	// a ready again: b reopens with a fresh deadline, and is released once its Job completes.
	aReady := time.Now()
	g.Expect(os.WriteFile(filepath.Join(dir, "a-ready"), nil, 0o600)).To(Succeed())
	g.Eventually(func(g Gomega) {
		j := waitJobOf(g, "reclose-b")
		g.Expect(j.Spec.ActiveDeadlineSeconds).NotTo(BeNil())
		// Counted from the reopening (the Job controller counts from the Job's start): b's 8 s
		// after a became ready, not after b first opened.
		g.Expect(*j.Spec.ActiveDeadlineSeconds).To(BeNumerically(">=", 8+int64(aReady.Sub(j.CreationTimestamp.Time).Seconds())))
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "b-ready"), nil, 0o600)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(sequence.StateOf(waitJobOf(g, "reclose-b"))).To(Equal(sequence.JobComplete))
		expectReleased(g, ns, "c")
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// TestFailedMemberFailsItsGroupAtOnce: a group's member fails for good (a Job whose pod exits 1, no retries); its
// waiter exits with the member-failed code, and the real Job controller fails the wait Job at once
// by its pod failure policy (one failed pod, reason PodFailurePolicy), not after the retries a
// crashing waiter gets. The local cluster's pod runner runs both the member's pod and the waiter
// for real and reports their exit codes as a kubelet does. The group is Failed and the later
// group stays gated.
func TestFailedMemberFailsItsGroupAtOnce(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := "fails"
	manifest := setupThenApp(ns, "exit 1")
	path := writeTemp(t, manifest)
	run(t, "apply", "-f", path)
	t.Cleanup(func() { _ = exec.Command(kubectl, "delete", "namespace", ns, "--wait=true", "--timeout=90s").Run() })

	g.Eventually(func(g Gomega) {
		jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: keys.WaitGroupLabel + "=setup"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(jobs.Items).To(HaveLen(1))
		j := jobs.Items[0]
		g.Expect(sequence.StateOf(&j)).To(Equal(sequence.JobFailed))
		var reason string
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				reason = c.Reason
			}
		}
		g.Expect(reason).To(Equal(batchv1.JobReasonPodFailurePolicy))
		g.Expect(j.Status.Failed).To(BeEquivalentTo(1), "the waiter was retried although a member failed")
	}).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	waitSummary(t, ns, "setup 0/1 Failed")
	expectAppGated(g, ns, "although the setup group failed")
}

// setupThenApp is an opted-in namespace ns with two groups: setup, a Job whose pod the local
// cluster's pod runner runs for real (sh -c command; no retries), and app, a Deployment of one pod.
func setupThenApp(ns, command string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s, labels: {wavegate.io/enabled: "true"}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: setup, namespace: %[1]s, labels: {wavegate.io/group: setup, wavegate.io/group-order: "1"}}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels: {dev.wavegate.io/exec: "true"}
    spec:
      restartPolicy: Never
      containers: [{name: setup, image: setup:1, command: [sh, -c, %[2]q]}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: %[1]s, labels: {wavegate.io/group: app, wavegate.io/group-order: "2"}}
spec:
  replicas: 1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers: [{name: app, image: app:1}]
`, ns, command)
}

// expectAppGated checks that setupThenApp's app pods exist and are all still gated.
func expectAppGated(g Gomega, ns, why string) {
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=app"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.Items).NotTo(BeEmpty())
	for _, p := range pods.Items {
		g.Expect(gated(p)).To(BeTrue(), "app pod %s was released %s", p.Name, why)
	}
}

// TestReadyAtTheDeadlineStaysReleased: a group that becomes ready a moment before its timeout is
// released, whatever the real Job controller concludes. Its waiter marks its Job and exits 0, but the
// controller hears of the exit at the kubelet's next PLEG relist (the pod runner's, up to a second
// later) and batches pod updates for up to a second more; it checks the deadline before success,
// so it may fail the Job with DeadlineExceeded although the group was ready. The group's member is
// a LoadBalancer Service (ready once its status lists an ingress: a status write, no new
// revision), made ready 700 ms before the wait Job's deadline.
func TestReadyAtTheDeadlineStaysReleased(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const ns = "brink"
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s, labels: {wavegate.io/enabled: "true"}}
---
apiVersion: wavegate.io/v1alpha1
kind: WavePolicy
metadata: {name: brink}
spec:
  readiness: {loadBalancerIngress: true}
  groups:
  - {name: brink-lb, order: 1, timeout: 6s}
  - {name: brink-web, order: 2}
---
apiVersion: v1
kind: Service
metadata: {name: lb, namespace: %[1]s, labels: {wavegate.io/group: brink-lb}}
spec:
  type: LoadBalancer
  selector: {app: lb}
  ports: [{port: 80}]
---
%[2]s`, ns, oneReplicaDeployment(ns, "web", "brink-web"))
	path := writeTemp(t, manifest)
	g.Eventually(func() error { return exec.Command(kubectl, "apply", "-f", path).Run() }).WithTimeout(30 * time.Second).Should(Succeed())
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "namespace", ns, "--wait=false").Run()
		_ = exec.Command(kubectl, "delete", "wavepolicy", "brink", "--wait=false").Run()
	})
	// The wait Job armed and started: its deadline is its start plus activeDeadlineSeconds, as the
	// Job controller counts it.
	var job *batchv1.Job
	g.Eventually(func(g Gomega) {
		jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: keys.WaitGroupLabel + "=brink-lb"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(jobs.Items).To(HaveLen(1))
		job = &jobs.Items[0]
		g.Expect(job.Spec.ActiveDeadlineSeconds).NotTo(BeNil())
		g.Expect(job.Status.StartTime).NotTo(BeNil())
	}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	deadline := job.Status.StartTime.Add(time.Duration(*job.Spec.ActiveDeadlineSeconds) * time.Second)
	g.Expect(time.Until(deadline)).To(BeNumerically(">", time.Second), "too late to aim at the deadline")
	time.Sleep(time.Until(deadline.Add(-700 * time.Millisecond))) // aiming at an instant: no event to wait for
	run(t, "patch", "service", "lb", "-n", ns, "--subresource=status", "--type=merge",
		"-p", `{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}`)

	// What the Job controller made of it, once it decided.
	g.Eventually(func(g Gomega) sequence.JobState {
		j, err := cs.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		job = j
		return sequence.StateOf(j)
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(BeElementOf(sequence.JobComplete, sequence.JobTimedOut))
	mark := job.Annotations[keys.WaiterReadyAnnotation]
	t.Logf("the wait Job ended %v (waiter's mark %q, deadline %s)", job.Status.Conditions, mark, deadline.Format(time.RFC3339Nano))
	if at, err := time.Parse(time.RFC3339Nano, mark); err != nil || !at.Before(deadline) {
		// A machine too slow to mark the group ready before its deadline: the group timed out, as it
		// should, and this run says nothing about the race.
		t.Skipf("inconclusive: the waiter did not mark its Job before the deadline (mark %q)", mark)
	}
	// The group was ready in time: released, whether the Job Completed or failed DeadlineExceeded.
	waitSummary(t, ns, "brink-lb 1/1 Released")
	g.Eventually(func(g Gomega) { expectReleased(g, ns, "web") }).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Consistently(func() string { return sequenceSummaryOf(ns) }).WithTimeout(3 * time.Second).Should(ContainSubstring("brink-lb 1/1 Released"))
}

// oneReplicaDeployment is the manifest of a Deployment of one pod (labeled app=<name>) in a group.
func oneReplicaDeployment(ns, name, group string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[2]s, namespace: %[1]s, labels: {wavegate.io/group: %[3]s}}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec:
      containers: [{name: %[2]s, image: %[2]s:1}]
`, ns, name, group)
}

func sequenceSummaryOf(seq string) string {
	out, _ := exec.Command(kubectl, "get", "sequence", seq, "-o", "jsonpath={.status.summary}").Output()
	return string(out)
}

// TestGrantedKindIsOrderedWithinSeconds: a ClusterRole labeled wavegate.io/aggregate-to-manager that
// grants wavegate a new custom resource kind is reviewed when it changes, not at the next periodic
// review (every 30 s): within a few seconds admission stops warning that the kind's members are not
// ordered, and a later group waits for such a member.
func TestGrantedKindIsOrderedWithinSeconds(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const ns = "granted"
	setup := writeTemp(t, fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s, labels: {wavegate.io/enabled: "true"}}
---
apiVersion: wavegate.io/v1alpha1
kind: WavePolicy
metadata: {name: granted}
spec:
  groups:
  - {name: granted-gadget, order: 1}
  - {name: granted-web, order: 2}
`, ns))
	grant := writeTemp(t, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: wavegate-gadgets
  labels: {wavegate.io/aggregate-to-manager: "true"}
rules:
- apiGroups: [example.com]
  resources: [gadgets]
  verbs: [get, list, watch, patch, delete]
`)
	gadget := writeTemp(t, fmt.Sprintf(`apiVersion: example.com/v1
kind: Gadget
metadata: {name: g, namespace: %s, labels: {wavegate.io/group: granted-gadget}}
`, ns))
	web := writeTemp(t, oneReplicaDeployment(ns, "web", "granted-web"))
	g.Eventually(func() error { return exec.Command(kubectl, "apply", "-f", setup).Run() }).WithTimeout(30 * time.Second).Should(Succeed())
	t.Cleanup(func() {
		// The namespace first: without the grant, wavegate could not release the Gadget's finalizer.
		_ = exec.Command(kubectl, "delete", "namespace", ns, "--wait=true", "--timeout=90s").Run()
		_ = exec.Command(kubectl, "delete", "-f", grant, "--wait=false").Run()
		_ = exec.Command(kubectl, "delete", "-f", setup, "--wait=false").Run()
	})
	run(t, "wait", "--for", "condition=Established", "crd/gadgets.example.com", "--timeout=60s")
	notOrdered := func() string {
		out, err := exec.Command(kubectl, "create", "--dry-run=server", "-f", gadget).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		return string(out)
	}
	g.Expect(notOrdered()).To(ContainSubstring("wavegate may not list and watch gadgets.example.com"))

	run(t, "apply", "-f", grant)
	granted := time.Now()
	g.Eventually(notOrdered).WithTimeout(6*time.Second).WithPolling(200*time.Millisecond).
		ShouldNot(ContainSubstring("may not list and watch"), "the grant was not reviewed within seconds")
	t.Logf("admission saw the grant %s after it was applied", time.Since(granted).Round(100*time.Millisecond))
	run(t, "apply", "-f", gadget)
	run(t, "apply", "-f", web)
	waitSummary(t, ns, "granted-gadget 0/1 Waiting")
	g.Consistently(func(g Gomega) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range pods.Items {
			g.Expect(gated(p)).To(BeTrue(), "the web was released before the gadget was ready")
		}
	}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}
