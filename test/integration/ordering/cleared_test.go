package ordering

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
	g := NewWithT(t)
	ctx := context.Background()
	probe := sequence.ObjectName("test-probe")
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "test-deny-sequence-status"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update, admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{wavev1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"sequences/status", "sequences"}}}}}},
			// Every status write, and the creation of the probe (how the test sees the policy work).
			Validations: []admissionregistrationv1.Validation{{Expression: "request.subResource != 'status' && object.metadata.name != '" + probe + "'",
				Message: "test: no Sequence status"}}}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-deny-sequence-status"},
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
	g.Eventually(func() error {
		return env.Client.Create(ctx, &wavev1.Sequence{ObjectMeta: metav1.ObjectMeta{Name: probe}, Spec: wavev1.SequenceSpec{Sequence: "test-probe"}}, client.DryRunAll)
	}).WithTimeout(10 * time.Second).Should(MatchError(ContainSubstring("test: no Sequence status")))
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
