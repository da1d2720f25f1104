package admission

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/webhookconfig"
)

// TestPolicyGroupLabelReachesTheWebhook: a policy naming an existing label makes objects that
// carry only that label members, without any manifest change.
func TestPolicyGroupLabelReachesTheWebhook(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	const component = "app.kubernetes.io/component"
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "components-" + ns}, Spec: wavev1.WavePolicySpec{
		GroupLabel: component,
		Groups:     []wavev1.GroupSpec{{Name: "database", Order: 1}, {Name: "frontend", Order: 3}},
	}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())

	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "fe-", Namespace: ns, Labels: labels(component, "frontend")}}
		g.Expect(env.Client.Create(ctx, cm, client.DryRunAll)).To(Succeed())
		g.Expect(cm.Annotations).To(Equal(resolvedAnnotations(ns, "frontend", "3", "300")))
	}).WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())

	// The API server calls the webhook for cluster-scoped objects whatever the namespace selector
	// says, and charts label their ClusterRoles and CRDs with app.kubernetes.io/component for their
	// own reasons: such an object names no sequence, so it joins none and is admitted unchanged,
	// with or without a group the policy knows (it was denied: "a cluster-scoped object must name the
	// sequence it joins").
	for _, group := range []string{"frontend", "controller"} {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "chart-", Labels: labels(component, group)}}
		g.Expect(env.Client.Create(ctx, cr)).To(Succeed(), "a cluster-scoped object with the policy's label %s=%s", component, group)
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cr) })
		g.Expect(cr.Annotations).To(BeEmpty())
		g.Expect(cr.Finalizers).To(BeEmpty())
		cr.Labels["app.kubernetes.io/version"] = "2"
		g.Expect(env.Client.Update(ctx, cr)).To(Succeed(), "an upgrade that changes its labels")
		// The member tracker sees it under no sequence (""), and the pass for it writes no Sequence:
		// it tried one named "-e3b0c442", refused as invalid, on every retry.
		g.Eventually(func() []string {
			var names []string
			for _, o := range mgr.Wavegate.Members.Members("") {
				names = append(names, o.GetName())
			}
			return names
		}).WithTimeout(10 * time.Second).Should(ContainElement(cr.Name))
	}
	g.Consistently(refusedSequences.n.Load).WithTimeout(2*time.Second).Should(BeZero(), "Sequence writes refused as invalid")

	d := deployment(ns, "web", labels(component, "frontend"))
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue("wavegate.io/group", "frontend"), "its pods must reach the webhook as members")

	// A pod with only the policy's label (a bare pod, an operator's) is gated, carries the group in
	// wavegate's label, and is released: no earlier group has members.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: ns, Labels: labels(component, "frontend")},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	g.Expect(pod.Labels).To(HaveKeyWithValue("wavegate.io/group", "frontend"))
	g.Expect(pod.Spec.SchedulingGates).NotTo(BeEmpty())
	g.Eventually(func(g Gomega) []corev1.PodSchedulingGate {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		return pod.Spec.SchedulingGates
	}).WithTimeout(10*time.Second).Should(BeEmpty(), "a pod grouped by the policy's label stays gated")

	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		c := meta.FindStatusCondition(p.Status.Conditions, policy.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(10 * time.Second).Should(Succeed())

	// The DELETE check sees such members too (a foreground deletion of one is checked).
	g.Eventually(func(g Gomega) []string {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "validating-webhook-configuration"}, cfg)).To(Succeed())
		var names []string
		for _, w := range cfg.Webhooks {
			names = append(names, w.Name)
		}
		return names
	}).WithTimeout(10 * time.Second).Should(ContainElement(webhookconfig.EntryName(component)))

	// Deleting the policy removes the entry: the label means nothing to wavegate again.
	g.Expect(env.Client.Delete(ctx, p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "mutating-webhook-configuration"}, cfg)).To(Succeed())
		for _, w := range cfg.Webhooks {
			g.Expect(w.Name).NotTo(Equal(webhookconfig.EntryName(component)))
		}
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

func TestConflictingPoliciesReportIt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	group := "shared-" + ns
	a := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "a-" + ns}, Spec: wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: group, Order: 1}}}}
	b := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "b-" + ns}, Spec: wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: group, Order: 2}}}}
	for _, p := range []*wavev1.WavePolicy{a, b} {
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	}
	for _, p := range []*wavev1.WavePolicy{a, b} {
		g.Eventually(func(g Gomega) {
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			c := meta.FindStatusCondition(p.Status.Conditions, policy.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(policy.ReasonConflict))
			g.Expect(c.Message).To(ContainSubstring(`define group "` + group + `" with orders 1 and 2`))
		}).WithTimeout(10 * time.Second).Should(Succeed())
	}
	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "c-", Namespace: ns, Labels: labels("wavegate.io/group", group)}}
		g.Expect(env.Client.Create(ctx, cm, client.DryRunAll)).To(MatchError(ContainSubstring("make the policies agree")))
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

func TestInvalidReadinessRuleIsReported(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "bad-rule-"}, Spec: wavev1.WavePolicySpec{
		Readiness: wavev1.Readiness{Rules: []wavev1.ReadinessRule{{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.status.("}}}}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		c := meta.FindStatusCondition(p.Status.Conditions, policy.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(policy.ReasonInvalidReadiness))
		g.Expect(c.Message).To(And(ContainSubstring("spec.readiness.rules[0].current"), ContainSubstring("stop on it")))
	}).WithTimeout(10 * time.Second).Should(Succeed())
}
