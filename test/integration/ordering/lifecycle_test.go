package ordering

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
)

// releaseAll drives an installed app to fully released.
func releaseAll(t *testing.T, a *app) {
	t.Helper()
	releaseAllUntil(t, a, "database 1/1 Released, migrate 1/1 Released, web 1/1 Released")
}

// releaseAllUntil releases the app's groups one after the other, then waits for the summary.
func releaseAllUntil(t *testing.T, a *app, summary string) {
	t.Helper()
	eventuallyUngated(t, a.dbPod)
	markStatefulSetReady(t, a.db)
	eventuallyUngated(t, a.migPod)
	markJobComplete(t, a.migrate)
	eventuallyUngated(t, a.webPod)
	markDeploymentReady(t, a.web)
	NewWithT(t).Eventually(func(g Gomega) string { return sequenceStatus(g, a.ns).Status.Summary }).WithTimeout(timeout).
		Should(Equal(summary))
}

func TestUpgradeOrder(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := installApp(t)
	releaseAll(t, a)

	// One apply changes the database image and the web image.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(a.db), a.db)).To(Succeed())
	a.db.Spec.Template.Spec.Containers[0].Image = "postgres:17"
	g.Expect(env.Client.Update(ctx, a.db)).To(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(a.web), a.web)).To(Succeed())
	a.web.Spec.Template.Spec.Containers[0].Image = "web:2"
	g.Expect(env.Client.Update(ctx, a.web)).To(Succeed())

	// The database rolls out first: its new pod starts at once; the new web pod (a new ReplicaSet)
	// is gated; the old web pod keeps running.
	newDB := podOf(t, a.db, a.db.Spec.Template, "controller-revision-hash", "db-2")
	newWeb := podOf(t, a.web, a.web.Spec.Template, "pod-template-hash", "v2")
	eventuallyUngated(t, newDB)
	g.Eventually(groupPhase(a.ns, "database")).WithTimeout(timeout).Should(Equal(wavev1.GroupWaiting))
	expectGated(t, newWeb)
	g.Expect(gated(g, a.webPod)).To(BeFalse(), "the old web pod must keep serving")

	markStatefulSetReady(t, a.db)
	t.Cleanup(func() {
		if t.Failed() {
			s := sequenceStatus(NewWithT(t), a.ns)
			t.Logf("sequence: %+v", s.Status)
			for _, gs := range s.Status.Groups {
				if ns, n, ok := strings.Cut(gs.WaitJob, "/"); ok {
					t.Logf("%s log:\n%s", gs.WaitJob, runner.Log(ns, n))
				}
			}
		}
	})
	// The migration did not change: its barrier still holds. The web changed: its new revision gets
	// its own wait Job, and its new pod starts once every earlier group is released.
	eventuallyUngated(t, newWeb)
	g.Eventually(groupPhase(a.ns, "migrate")).WithTimeout(timeout).Should(Equal(wavev1.GroupReleased))
	g.Eventually(groupPhase(a.ns, "web")).WithTimeout(timeout).Should(Equal(wavev1.GroupWaiting))
}

func TestTimeoutBlocksLaterGroups(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	p, _, after := twoGroups(t, ns, "timeouts",
		wavev1.GroupSpec{Name: "slow", Timeout: &metav1.Duration{Duration: 2 * time.Second}}, wavev1.GroupSpec{Name: "after"})
	afterPod := podOf(t, after, after.Spec.Template, "pod-template-hash", "a1")

	g.Eventually(groupPhase(ns, "slow-"+ns)).WithTimeout(timeout).Should(Equal(wavev1.GroupTimedOut))
	expectGated(t, afterPod)
	seq := sequenceStatus(g, ns)
	c := meta.FindStatusCondition(seq.Status.Conditions, "Ready")
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Reason).To(Equal(string(wavev1.GroupTimedOut)))
	g.Expect(c.Message).To(ContainSubstring("not ready within 2s"))
	jobNS, jobName, _ := strings.Cut(seq.Status.Groups[0].WaitJob, "/")
	g.Expect(runner.Log(jobNS, jobName)).To(ContainSubstring("stopped before group"))
	j := &batchv1.Job{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: jobNS, Name: jobName}, j)).To(Succeed())
	// Created as soon as the cache showed the group open, armed once the consistent read confirmed
	// it: the group's timeout plus the (second-rounded) time the Job existed before.
	g.Expect(j.Spec.ActiveDeadlineSeconds).To(HaveValue(BeNumerically("~", 3, 1)), "the Job's deadline is the group's timeout, counted from its opening")
	g.Expect(j.Status.Conditions).To(ContainElement(HaveField("Reason", batchv1.JobReasonDeadlineExceeded)))
	g.Eventually(func(g Gomega) []string {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
		var reasons []string
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning {
				reasons = append(reasons, e.Reason)
			}
		}
		return reasons
	}).WithTimeout(timeout).Should(ContainElement(sequence.ReasonGroupTimedOut))

	// The policy now releases on timeout: later groups go ahead.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error { // the status controller writes it too
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Spec.Groups[0].OnTimeout = wavev1.OnTimeoutRelease
		return env.Client.Update(ctx, p)
	})).To(Succeed())
	eventuallyUngated(t, afterPod)
}

// TestFailedMemberFailsItsGroupAtOnce: a member that failed for good fails its group's wait Job at
// once, through the Job's pod failure policy (the waiter's exit code), not after the retries a
// waiter that failed otherwise gets; later groups stay gated.
func TestFailedMemberFailsItsGroupAtOnce(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "fails-" + ns}, Spec: wavev1.WavePolicySpec{
		Groups: []wavev1.GroupSpec{{Name: "migrate-" + ns, Order: 1}, {Name: "web-" + ns, Order: 2}}}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	migrate := job(ns, "migrate", map[string]string{keys.GroupLabel: "migrate-" + ns})
	g.Eventually(func() error { return env.Client.Create(ctx, migrate) }).WithTimeout(timeout).Should(Succeed())
	web := deployment(ns, "web", map[string]string{keys.GroupLabel: "web-" + ns})
	g.Expect(env.Client.Create(ctx, web)).To(Succeed())
	webPod := podOf(t, web, web.Spec.Template, "pod-template-hash", "w1")
	markJobFailed(t, migrate)

	g.Eventually(groupPhase(ns, "migrate-"+ns)).WithTimeout(timeout).Should(Equal(wavev1.GroupFailed))
	expectGated(t, webPod)
	seq := sequenceStatus(g, ns)
	g.Expect(seq.Status.Groups[0].Message).To(HavePrefix("a member failed"))
	jobNS, jobName, _ := strings.Cut(seq.Status.Groups[0].WaitJob, "/")
	j := &batchv1.Job{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: jobNS, Name: jobName}, j)).To(Succeed())
	g.Expect(j.Status.Conditions).To(ContainElement(And(HaveField("Type", batchv1.JobFailed), HaveField("Reason", batchv1.JobReasonPodFailurePolicy))))
	g.Expect(runner.Log(jobNS, jobName)).NotTo(ContainSubstring("running it again"), "the waiter ran once")
}

func TestRequiredGroupBlocksWhileItHasNoMembers(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "required-" + ns}, Spec: wavev1.WavePolicySpec{
		Groups: []wavev1.GroupSpec{{Name: "db-" + ns, Order: 1, Required: true}, {Name: "app-" + ns, Order: 2}}}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	app := deployment(ns, "app", map[string]string{keys.GroupLabel: "app-" + ns})
	g.Eventually(func() error { return env.Client.Create(ctx, app) }).WithTimeout(timeout).Should(Succeed())
	appPod := podOf(t, app, app.Spec.Template, "pod-template-hash", "a")
	g.Eventually(groupPhase(ns, "db-"+ns)).WithTimeout(timeout).Should(Equal(wavev1.GroupWaiting))
	expectGated(t, appPod)
	g.Expect(sequenceStatus(g, ns).Status.Groups[0].Message).To(Equal("required group has no members yet"))

	// The database arrives with a separate sync; once ready, the app goes.
	db := statefulSet(ns, "db", map[string]string{keys.GroupLabel: "db-" + ns})
	g.Expect(env.Client.Create(ctx, db)).To(Succeed())
	expectGated(t, appPod)
	markStatefulSetReady(t, db)
	eventuallyUngated(t, appPod)
}

// TestManagerRestartMidSequence kills the manager while a group waits: nothing is released while
// it is down, and the new manager resumes from the cluster's state alone.
func TestManagerRestartMidSequence(t *testing.T) {
	g := NewWithT(t)
	a := installApp(t)
	eventuallyUngated(t, a.dbPod)
	g.Eventually(groupPhase(a.ns, "database")).WithTimeout(timeout).Should(Equal(wavev1.GroupWaiting))

	mgr.Stop()
	markStatefulSetReady(t, a.db) // the wait Job (not the manager) sees this and completes
	g.Eventually(func(g Gomega) bool {
		var jobs batchv1.JobList
		g.Expect(env.Client.List(context.Background(), &jobs, client.InNamespace(a.ns),
			client.MatchingLabels{keys.WaitJobLabel: "true", keys.WaitGroupLabel: "database"})).To(Succeed())
		g.Expect(jobs.Items).To(HaveLen(1))
		return sequence.StateOf(&jobs.Items[0]) == sequence.JobComplete
	}).WithTimeout(timeout).Should(BeTrue())
	expectGated(t, a.migPod, a.webPod) // no manager, no release

	var err error
	mgr, err = env.StartManager(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	eventuallyUngated(t, a.migPod)
	expectGated(t, a.webPod)
	markJobComplete(t, a.migrate)
	eventuallyUngated(t, a.webPod)
}

// waitJobOf returns the wait Job the Sequence status names for a group, once it names one.
func waitJobOf(t *testing.T, seq, group string) *batchv1.Job {
	t.Helper()
	g := NewWithT(t)
	j := &batchv1.Job{}
	g.Eventually(func(g Gomega) {
		for _, gs := range sequenceStatus(g, seq).Status.Groups {
			if gs.Name == group {
				ns, name, ok := strings.Cut(gs.WaitJob, "/")
				g.Expect(ok).To(BeTrue(), "group %s has no wait Job yet", group)
				g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, j)).To(Succeed())
				return
			}
		}
		g.Expect(group).To(BeEmpty(), "no group %s in the Sequence status", group)
	}).WithTimeout(timeout).Should(Succeed())
	return j
}

// The waiter of the group after the one that is waiting starts ahead of its turn, unarmed: its
// group's timeout counts from when the group opens, not from when its waiter started.
func TestPrestartedWaiterTimesOutFromItsGroupsOpening(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	const limit = 3 * time.Second
	_, first, _ := twoGroups(t, ns, "prestart",
		wavev1.GroupSpec{Name: "first"}, wavev1.GroupSpec{Name: "second", Timeout: &metav1.Duration{Duration: limit}})

	pre := waitJobOf(t, ns, "second-"+ns)
	g.Expect(pre.Spec.ActiveDeadlineSeconds).To(BeNil(), "a waiter started ahead of its turn has no deadline yet")
	g.Expect(groupPhase(ns, "second-"+ns)(g)).To(Equal(wavev1.GroupPending))
	// The pre-started waiter runs longer than the group's timeout before the group opens.
	g.Consistently(groupPhase(ns, "second-"+ns)).WithTimeout(limit + time.Second).Should(Equal(wavev1.GroupPending))

	markStatefulSetReady(t, first)
	g.Eventually(groupPhase(ns, "first-"+ns)).WithTimeout(timeout).Should(Equal(wavev1.GroupReleased))
	opened := time.Now()
	g.Eventually(func(g Gomega) *int64 {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pre), pre)).To(Succeed())
		return pre.Spec.ActiveDeadlineSeconds
	}).WithTimeout(timeout).ShouldNot(BeNil(), "the waiter is armed when its group opens")
	g.Expect(time.Duration(*pre.Spec.ActiveDeadlineSeconds)*time.Second).To(BeNumerically(">=", limit+opened.Sub(pre.CreationTimestamp.Time)-time.Second),
		"the deadline counts the group's timeout from its opening")
	// Not timed out at once although its waiter started long before: only a timeout after opening.
	g.Consistently(groupPhase(ns, "second-"+ns)).WithTimeout(limit - time.Second).Should(Equal(wavev1.GroupWaiting))
	g.Eventually(groupPhase(ns, "second-"+ns)).WithTimeout(timeout).Should(Equal(wavev1.GroupTimedOut))
}

// TestReclosedGroupsWaiterIsDisarmed: a group that opened (its waiter armed) and closes again,
// because the group before it is upgraded, loses its waiter's deadline while it waits for that
// rollout, and gets one again when it reopens: its timeout counts from then. Here the upgrade
// takes longer than the group's timeout, and the group times out only its timeout after reopening.
func TestReclosedGroupsWaiterIsDisarmed(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	const limit = 3 * time.Second
	_, first, _ := twoGroups(t, ns, "disarm",
		wavev1.GroupSpec{Name: "first"}, wavev1.GroupSpec{Name: "second", Timeout: &metav1.Duration{Duration: limit}})
	second := "second-" + ns
	w := waitJobOf(t, ns, second)
	deadline := func(g Gomega) *int64 {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(w), w)).To(Succeed())
		return w.Spec.ActiveDeadlineSeconds
	}
	markStatefulSetReady(t, first)
	g.Eventually(deadline).WithTimeout(timeout).WithPolling(20*time.Millisecond).ShouldNot(BeNil(), "the waiter is armed when its group opens")

	// The first group is upgraded: the second closes, and its waiter (same revision, still running)
	// loses its deadline.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(first), first)).To(Succeed())
	first.Spec.Template.Spec.Containers[0].Image = "postgres:17"
	g.Expect(env.Client.Update(ctx, first)).To(Succeed())
	g.Eventually(deadline).WithTimeout(timeout).WithPolling(20*time.Millisecond).Should(BeNil(), "the waiter of a group that closed keeps its deadline")
	g.Eventually(groupPhase(ns, second)).WithTimeout(timeout).Should(Equal(wavev1.GroupPending))
	// The upgrade takes longer than the second group's timeout: its waiter neither times out nor
	// goes (its group is next).
	g.Consistently(func(g Gomega) {
		g.Expect(deadline(g)).To(BeNil())
		g.Expect(w.Status.Conditions).To(BeEmpty())
	}).WithTimeout(limit + time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

	opened := time.Now()
	markStatefulSetReady(t, first)
	g.Eventually(deadline).WithTimeout(timeout).WithPolling(20*time.Millisecond).ShouldNot(BeNil(), "the waiter is armed again when its group reopens")
	g.Expect(time.Duration(*w.Spec.ActiveDeadlineSeconds)*time.Second).To(BeNumerically(">=", limit+opened.Sub(w.CreationTimestamp.Time)-time.Second),
		"the deadline counts the group's timeout from its reopening")
	g.Consistently(groupPhase(ns, second)).WithTimeout(limit - time.Second).Should(Equal(wavev1.GroupWaiting))
	g.Eventually(groupPhase(ns, second)).WithTimeout(timeout).Should(Equal(wavev1.GroupTimedOut))
}

// A waiter started ahead of its turn is removed when the group before it times out (Block): its
// group does not open until that group changes.
func TestPrestartedWaiterGoesWhenTheGroupBeforeTimesOut(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	twoGroups(t, ns, "prestart-block",
		wavev1.GroupSpec{Name: "slow", Timeout: &metav1.Duration{Duration: 2 * time.Second}}, wavev1.GroupSpec{Name: "next"})
	pre := waitJobOf(t, ns, "next-"+ns)
	g.Eventually(groupPhase(ns, "slow-"+ns)).WithTimeout(timeout).Should(Equal(wavev1.GroupTimedOut))
	g.Eventually(func() bool {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(pre), pre)
		return err != nil || pre.DeletionTimestamp != nil
	}).WithTimeout(timeout).Should(BeTrue(), "the pre-started waiter of a group that cannot open is deleted")
}

// twoGroups creates a WavePolicy named <policy>-<ns> of two groups in this order (their names and
// those of their members suffixed with -<ns>, their other fields as given), a StatefulSet named
// after the first group in it, and a Deployment named after the second in it.
func twoGroups(t *testing.T, ns, policy string, first, second wavev1.GroupSpec) (*wavev1.WavePolicy, *appsv1.StatefulSet, *appsv1.Deployment) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	base1, base2 := first.Name, second.Name
	first.Name, first.Order = base1+"-"+ns, 1
	second.Name, second.Order = base2+"-"+ns, 2
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: policy + "-" + ns}, Spec: wavev1.WavePolicySpec{
		Groups: []wavev1.GroupSpec{first, second}}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	sts := statefulSet(ns, base1, map[string]string{keys.GroupLabel: first.Name})
	dep := deployment(ns, base2, map[string]string{keys.GroupLabel: second.Name})
	g.Eventually(func() error { return env.Client.Create(ctx, sts) }).WithTimeout(timeout).Should(Succeed())
	g.Expect(env.Client.Create(ctx, dep)).To(Succeed())
	return p, sts, dep
}

// TestPrunedMemberDoesNotStallLaterGroups: one member of an earlier group is deleted while the
// group stays (a ConfigMap dropped from Git and pruned). Teardown holds it while later groups
// exist, and the group's revision no longer counts it: the group gets the wait Job of its new
// revision and is released again, so a later group's upgrade still rolls out. (Without that Job the
// group stayed unreleased for as long as the member was held, and every later group's new pods
// stayed gated: for good, since the later groups are not going away.)
func TestPrunedMemberDoesNotStallLaterGroups(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := installApp(t)
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: a.ns, Labels: member("database", 1)}}
	g.Expect(env.Client.Create(ctx, settings)).To(Succeed())
	releaseAllUntil(t, a, "database 2/2 Released, migrate 1/1 Released, web 1/1 Released")

	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(settings), settings)).To(Succeed())
	g.Expect(settings.Finalizers).To(ContainElement(keys.TeardownFinalizer))
	g.Expect(env.Client.Delete(ctx, settings)).To(Succeed())

	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(a.web), a.web)).To(Succeed())
	a.web.Spec.Template.Spec.Containers[0].Image = "web:2"
	g.Expect(env.Client.Update(ctx, a.web)).To(Succeed())
	newWeb := podOf(t, a.web, a.web.Spec.Template, "pod-template-hash", "v2")
	eventuallyUngated(t, newWeb)
	g.Eventually(groupPhase(a.ns, "database")).WithTimeout(timeout).Should(Equal(wavev1.GroupReleased))
	// Teardown still holds the pruned member while the later groups exist.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(settings), settings)).To(Succeed())
	g.Expect(settings.DeletionTimestamp).NotTo(BeNil())
}
