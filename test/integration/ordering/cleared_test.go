package ordering

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/sequence"
)

// denySequenceStatus makes the API server refuse every write of a Sequence's status (a
// ValidatingAdmissionPolicy, removed after the test) and waits until it does.
func denySequenceStatus(t *testing.T) {
	t.Helper()
	probe := sequence.ObjectName("test-probe")
	// Every status write, and the creation of the probe (how the test sees the policy work).
	denyByPolicy(t, "test-deny-sequence-status", wavev1.GroupVersion.Group, []string{"sequences/status", "sequences"},
		"request.subResource != 'status' && object.metadata.name != '"+probe+"'", "test: no Sequence status",
		func() error {
			return env.Client.Create(context.Background(), &wavev1.Sequence{ObjectMeta: metav1.ObjectMeta{Name: probe},
				Spec: wavev1.SequenceSpec{Sequence: "test-probe"}}, client.DryRunAll)
		})
}

// denyByPolicy makes the API server refuse the creations and updates of resources of an API group
// for which expression is false (a ValidatingAdmissionPolicy and its binding, removed after the
// test), and waits until probe fails with message: the API server loads policies asynchronously.
func denyByPolicy(t *testing.T, name, apiGroup string, resources []string, expression, message string, probe func() error) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update, admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{apiGroup}, APIVersions: []string{"*"}, Resources: resources}}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: expression, Message: message}}}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
	for _, o := range []client.Object{policy, binding} {
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{binding, policy} {
			_ = client.IgnoreNotFound(env.Client.Delete(context.Background(), o))
		}
	})
	g.Eventually(probe).WithTimeout(10 * time.Second).Should(MatchError(ContainSubstring(message)))
}

// TestAdmissionHearsOfAReleaseBeforeTheStatus: the pass that releases a template tells this
// replica's admission at once, not only through the Sequence's status. With every status write
// refused, a replacement pod of the released database is still admitted without a gate.
func TestAdmissionHearsOfAReleaseBeforeTheStatus(t *testing.T) {
	g := NewWithT(t)
	denySequenceStatus(t)
	a := installApp(t)
	eventuallyUngated(t, a.dbPod)
	// The status never said so.
	s := &wavev1.Sequence{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: sequence.ObjectName(a.ns)}, s); err == nil {
		for _, gs := range s.Status.Groups {
			g.Expect(gs.ClearedTemplates).To(BeEmpty(), "a status was written despite the policy")
		}
	}
	replacement := podOf(t, a.db, a.db.Spec.Template, "controller-revision-hash", "db-1")
	g.Expect(replacement.Spec.SchedulingGates).To(BeEmpty(), "admission had not heard of the released template")
	// The web's pods are still gated: its group is not released.
	expectGated(t, podOf(t, a.web, a.web.Spec.Template, "pod-template-hash", "v1"))
}

// clearedTemplates returns what the Sequence's status clears for a group.
func clearedTemplates(seq, group string) func(g Gomega) []string {
	return func(g Gomega) []string {
		for _, gs := range sequenceStatus(g, seq).Status.Groups {
			if gs.Name == group {
				return gs.ClearedTemplates
			}
		}
		return nil
	}
}

// TestClearedTemplateGoesWithItsPods: a template stays cleared only while the sequence has pods of
// it. The web is rolled to a new template and the old one's pods go: the old template is no longer
// cleared, in the status and in admission. A rollback of the database and the web together then
// brings back the old template: in the moment before the controller sees that the database changed
// (here, every status write refused: admission keeps what it last heard), a pod of the old template
// is gated, and stays gated while the database is not released.
func TestClearedTemplateGoesWithItsPods(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := installApp(t)
	releaseAll(t, a)
	v1, v2 := string(a.web.UID)+"/v1", string(a.web.UID)+"/v2"
	g.Eventually(clearedTemplates(a.ns, "web")).WithTimeout(timeout).Should(ContainElement(v1))

	// The rollout to v2: its pod starts (the web's earlier groups are released), then the old
	// ReplicaSet is scaled to zero.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(a.web), a.web)).To(Succeed())
	old := a.web.Spec.Template.DeepCopy()
	a.web.Spec.Template.Spec.Containers[0].Image = "web:2"
	g.Expect(env.Client.Update(ctx, a.web)).To(Succeed())
	eventuallyUngated(t, podOf(t, a.web, a.web.Spec.Template, "pod-template-hash", "v2"))
	g.Expect(env.Client.Delete(ctx, a.webPod)).To(Succeed())
	g.Eventually(clearedTemplates(a.ns, "web")).WithTimeout(timeout).Should(Equal([]string{v2}),
		"a template without pods stayed cleared")
	// Admission has forgotten it too (a dry run asks the webhook without creating anything).
	g.Eventually(func(g Gomega) []corev1.PodSchedulingGate {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", Namespace: a.ns, Labels: map[string]string{"pod-template-hash": "v1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: a.web.UID, Controller: ptr.To(true)}}},
			Spec: old.Spec}
		for k, v := range old.Labels {
			p.Labels[k] = v
		}
		g.Expect(env.Client.Create(ctx, p, client.DryRunAll)).To(Succeed())
		return p.Spec.SchedulingGates
	}).WithTimeout(timeout).ShouldNot(BeEmpty())

	// The rollback.
	denySequenceStatus(t)
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(a.db), a.db)).To(Succeed())
	a.db.Spec.Template.Spec.Containers[0].Image = "postgres:15"
	g.Expect(env.Client.Update(ctx, a.db)).To(Succeed())
	back := podOf(t, a.web, *old, "pod-template-hash", "v1")
	g.Expect(back.Spec.SchedulingGates).NotTo(BeEmpty(), "a pod of the rolled-back template started ungated")
	expectGated(t, back)
}
