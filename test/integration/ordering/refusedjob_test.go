package ordering

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
)

// TestRefusedWaitJobIsReported: a policy engine (here a ValidatingAdmissionPolicy) that refuses
// wavegate's wait Jobs in a namespace keeps its groups from opening. The manager says so with a Warning Event on the Sequence that names the refusal and the
// fix, not only in its log.
func TestRefusedWaitJobIsReported(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	denyByPolicy(t, "test-deny-wait-jobs-"+ns, "batch", []string{"jobs"},
		"object.metadata.namespace != '"+ns+"' || !has(object.metadata.labels) || !('"+keys.WaitJobLabel+"' in object.metadata.labels)",
		"test: jobs need resource limits",
		func() error {
			return env.Client.Create(ctx, job(ns, "probe", map[string]string{keys.WaitJobLabel: "true"}), client.DryRunAll)
		})
	g.Expect(env.Client.Create(ctx, deployment(ns, "db", member("db", 1)))).To(Succeed())
	g.Eventually(func(g Gomega) []string {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs)).To(Succeed())
		var msgs []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Sequence" && e.Regarding.Name == sequence.ObjectName(ns) && e.Type == corev1.EventTypeWarning &&
				e.Reason == sequence.ReasonWaitJobRefused {
				msgs = append(msgs, e.Note)
			}
		}
		return msgs
	}).WithTimeout(30 * time.Second).Should(ContainElement(And(ContainSubstring("group db cannot open"),
		ContainSubstring("test: jobs need resource limits"), ContainSubstring("allow wavegate's wait Jobs"))))
}

// TestRefusedWaitJobTimesOut: a group whose wait Job is refused still has its timeout, counted from
// the first refusal while it was open, and its policy's onTimeout applies: with Release, the later
// group's pods go once it has passed, and the Sequence says since when the Job is refused.
func TestRefusedWaitJobTimesOut(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	db, web := "db-"+ns, "web-"+ns
	dbThenWeb(t, "refused-"+ns, db, web, 3*time.Second, wavev1.OnTimeoutRelease)
	denyByPolicy(t, "test-deny-db-wait-jobs-"+ns, "batch", []string{"jobs"},
		"object.metadata.namespace != '"+ns+"' || !has(object.metadata.labels) || !('"+keys.WaitJobLabel+"' in object.metadata.labels) || object.metadata.labels['"+keys.WaitGroupLabel+"'] != '"+db+"'",
		"test: no wait Jobs for the database",
		func() error {
			return env.Client.Create(ctx, job(ns, "probe", map[string]string{keys.WaitJobLabel: "true", keys.WaitGroupLabel: db}), client.DryRunAll)
		})
	g.Eventually(func() error {
		return env.Client.Create(ctx, deployment(ns, "db", map[string]string{keys.GroupLabel: db}))
	}).WithTimeout(timeout).Should(Succeed())
	webDeploy := deployment(ns, "web", map[string]string{keys.GroupLabel: web})
	g.Expect(env.Client.Create(ctx, webDeploy)).To(Succeed())
	webPod := podOf(t, webDeploy, webDeploy.Spec.Template, "pod-template-hash", "w1")

	// Refused, and counting: the web waits.
	var since time.Time
	g.Eventually(func(g Gomega) {
		st := sequenceStatus(g, ns).Status.Groups
		g.Expect(st).NotTo(BeEmpty())
		g.Expect(st[0].Name).To(Equal(db))
		g.Expect(st[0].WaitJobRefusedSince).NotTo(BeNil())
		g.Expect(st[0].Message).To(ContainSubstring("its wait Job is refused"))
		since = st[0].WaitJobRefusedSince.Time
	}).WithTimeout(timeout).Should(Succeed())
	g.Expect(gated(g, webPod)).To(BeTrue(), "the web was released while the database's timeout ran")
	// Past the timeout the database is TimedOut, released anyway, and the web goes: not before.
	eventuallyUngated(t, webPod)
	g.Expect(time.Now()).To(BeTemporally(">=", since.Add(3*time.Second)), "the web was released before the database's timeout")
	// The pass that removes the gates writes the status beside them: it may land a moment later.
	g.Eventually(func(g Gomega) {
		st := sequenceStatus(g, ns).Status.Groups[0]
		g.Expect(st.Phase).To(Equal(wavev1.GroupTimedOut))
		g.Expect(st.Message).To(ContainSubstring("released anyway"))
	}).WithTimeout(timeout).Should(Succeed())
}

// TestRefusedWaitJobBlocksThenRuns: under onTimeout Block, a group timed out for want of its wait
// Job keeps the later group gated and keeps asking for the Job; once the policy allows it, the Job
// is created and armed with the group's timeout counted afresh, and the group is released when its
// member is ready.
func TestRefusedWaitJobBlocksThenRuns(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	db, web := "db-"+ns, "web-"+ns
	dbThenWeb(t, "blocked-"+ns, db, web, 2*time.Second, wavev1.OnTimeoutBlock)
	deny := "test-deny-blocked-wait-jobs-" + ns
	denyByPolicy(t, deny, "batch", []string{"jobs"},
		"object.metadata.namespace != '"+ns+"' || !has(object.metadata.labels) || !('"+keys.WaitJobLabel+"' in object.metadata.labels)",
		"test: no wait Jobs here",
		func() error {
			return env.Client.Create(ctx, job(ns, "probe", map[string]string{keys.WaitJobLabel: "true"}), client.DryRunAll)
		})
	dbDeploy := deployment(ns, "db", map[string]string{keys.GroupLabel: db})
	g.Eventually(func() error { return env.Client.Create(ctx, dbDeploy) }).WithTimeout(timeout).Should(Succeed())
	webDeploy := deployment(ns, "web", map[string]string{keys.GroupLabel: web})
	g.Expect(env.Client.Create(ctx, webDeploy)).To(Succeed())
	webPod := podOf(t, webDeploy, webDeploy.Spec.Template, "pod-template-hash", "w1")

	g.Eventually(groupPhase(ns, db)).WithTimeout(timeout).Should(Equal(wavev1.GroupTimedOut))
	g.Expect(gated(g, webPod)).To(BeTrue(), "the web was released although the database's policy says Block")

	// The policy engine allows wait Jobs again: the database's Job comes, armed from now.
	g.Expect(env.Client.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: deny}})).To(Succeed())
	allowed := time.Now()
	var waitJob batchv1.Job
	g.Eventually(func(g Gomega) {
		var jobs batchv1.JobList
		g.Expect(env.Client.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{keys.WaitJobLabel: "true", keys.WaitGroupLabel: db})).To(Succeed())
		g.Expect(jobs.Items).To(HaveLen(1))
		waitJob = jobs.Items[0]
		g.Expect(waitJob.Spec.ActiveDeadlineSeconds).NotTo(BeNil())
	}).WithTimeout(30*time.Second).Should(Succeed(), "the database's wait Job was not asked for again")
	g.Expect(waitJob.CreationTimestamp.Time).To(BeTemporally(">=", allowed.Add(-time.Second).Truncate(time.Second)))
	g.Eventually(groupPhase(ns, db)).WithTimeout(timeout).Should(Equal(wavev1.GroupWaiting))
	expectGated(t, webPod)
	markDeploymentReady(t, dbDeploy)
	eventuallyUngated(t, webPod)
}

// dbThenWeb creates a WavePolicy (removed after the test) that orders group db before web, db with
// a timeout and what happens past it.
func dbThenWeb(t *testing.T, name, db, web string, timeout time.Duration, onTimeout wavev1.OnTimeout) {
	t.Helper()
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: wavev1.WavePolicySpec{
		Groups: []wavev1.GroupSpec{
			{Name: db, Order: 1, Timeout: &metav1.Duration{Duration: timeout}, OnTimeout: onTimeout},
			{Name: web, Order: 2}}}}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
}
