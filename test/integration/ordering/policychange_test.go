package ordering

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/waiter"
)

// policyFor creates a WavePolicy for one namespace, deleted with the test.
func policyFor(t *testing.T, ns string, spec wavev1.WavePolicySpec) *wavev1.WavePolicy {
	t.Helper()
	spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "policy-" + ns}, Spec: spec}
	NewWithT(t).Expect(env.Client.Create(context.Background(), p)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
	return p
}

// TestPolicyChangeReachesTheWaitingGroup: a group that waits while its policy's readiness settings
// change is judged by the new ones. Its wait Job is replaced, and the replaced Job's waiter, which
// here runs on until its members look ready to it (the Job controller stops it a moment after the
// Job is deleted), marks the new Job of the same name by the old settings: that mark releases
// nothing. Without the change the LoadBalancer Service, ready by the defaults, released web before
// it had an address.
func TestPolicyChangeReachesTheWaitingGroup(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	pol := policyFor(t, ns, wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: "svc", Order: 1}, {Name: "web", Order: 2}}})
	in := func(group string) map[string]string { return map[string]string{keys.GroupLabel: group} }
	lb := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb", Namespace: ns, Labels: in("svc")},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	g.Eventually(func() error { return env.Client.Create(ctx, lb) }).WithTimeout(timeout).Should(Succeed())
	api := deployment(ns, "api", in("svc"))
	g.Expect(env.Client.Create(ctx, api)).To(Succeed())
	web := deployment(ns, "web", in("web"))
	g.Expect(env.Client.Create(ctx, web)).To(Succeed())
	pod := podOf(t, web, web.Spec.Template, "pod-template-hash", "v1")
	old := waitJobOf(t, ns, "svc")

	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pol), pol)).To(Succeed())
	pol.Spec.Readiness.LoadBalancerIngress = true
	g.Expect(env.Client.Update(ctx, pol)).To(Succeed())
	g.Eventually(func() types.UID { return waitJobOf(t, ns, "svc").UID }).WithTimeout(timeout).ShouldNot(Equal(old.UID),
		"the wait Job of svc was not replaced")
	g.Expect(waitJobOf(t, ns, "svc").Name).To(Equal(old.Name))

	// Both waiters now see the Deployment ready; only the replaced one calls the Service ready.
	markDeploymentReady(t, api)
	g.Eventually(func(g Gomega) string {
		return waitJobOf(t, ns, "svc").Annotations[keys.WaiterReadyAnnotation]
	}).WithTimeout(timeout).ShouldNot(BeEmpty(), "the replaced Job's waiter did not mark the new Job: the test proves nothing")
	expectGated(t, pod)
	g.Eventually(func(g Gomega) string { return sequenceStatus(g, ns).Status.Summary }).WithTimeout(timeout).
		Should(HavePrefix("svc 1/2 "), "the status judges the Service by the new settings")

	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(lb), lb)).To(Succeed())
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	g.Expect(env.Client.Status().Update(ctx, lb)).To(Succeed())
	eventuallyUngated(t, pod)
	// Released on the new waiter's mark: the real command's fingerprint is the one the manager
	// computes from the Job's arguments.
	current := waitJobOf(t, ns, "svc")
	args, err := waiter.ParseArgs(current.Spec.Template.Spec.Containers[0].Args)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() string { return waitJobOf(t, ns, "svc").Annotations[keys.WaiterCheckedAnnotation] }).
		WithTimeout(timeout).Should(Equal(args.Fingerprint()))
}

// TestShorterTimeoutAppliesToTheWaitingGroup: a policy whose timeout is made shorter while its
// group waits times the group out by the new timeout, counted from when the group opened, not
// from the change: the group's Job is re-armed. Without it the group waited out the old 10 min.
func TestShorterTimeoutAppliesToTheWaitingGroup(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	pol := policyFor(t, ns, wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: "db", Order: 1}, {Name: "web", Order: 2}}})
	db := deployment(ns, "db", map[string]string{keys.GroupLabel: "db"})
	// Once admission has heard of the policy.
	g.Eventually(func() error { return env.Client.Create(ctx, db) }).WithTimeout(timeout).Should(Succeed())
	web := deployment(ns, "web", map[string]string{keys.GroupLabel: "web"})
	g.Expect(env.Client.Create(ctx, web)).To(Succeed())
	g.Eventually(func() *int64 { return waitJobOf(t, ns, "db").Spec.ActiveDeadlineSeconds }).WithTimeout(timeout).
		ShouldNot(BeNil(), "the wait Job of db was not armed")
	armed := waitJobOf(t, ns, "db")
	g.Expect(*armed.Spec.ActiveDeadlineSeconds).To(BeNumerically(">=", 600))
	opened, err := time.Parse(time.RFC3339Nano, armed.Annotations[keys.WaitOpenedAnnotation])
	g.Expect(err).NotTo(HaveOccurred(), "the armed Job does not record when its group opened")

	// Past a shorter timeout already, counted from the opening: the group times out at once.
	g.Eventually(func() time.Duration { return time.Since(opened) }).WithTimeout(timeout).Should(BeNumerically(">", 2*time.Second))
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pol), pol)).To(Succeed())
	pol.Spec.Groups[0].Timeout = &metav1.Duration{Duration: time.Second}
	g.Expect(env.Client.Update(ctx, pol)).To(Succeed())
	g.Eventually(groupPhase(ns, "db")).WithTimeout(timeout).Should(Equal(wavev1.GroupTimedOut))
	j := waitJobOf(t, ns, "db")
	g.Expect(j.UID).To(Equal(armed.UID), "the Job was replaced, not re-armed")
	g.Expect(*j.Spec.ActiveDeadlineSeconds).To(BeNumerically("<", 600))
}
