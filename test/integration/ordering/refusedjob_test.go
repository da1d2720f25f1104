package ordering

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
)

// TestRefusedWaitJobIsReported: a policy engine (here a ValidatingAdmissionPolicy) that refuses
// wavegate's wait Jobs in a namespace keeps its groups from opening, and the group's timeout from
// counting. The manager says so with a Warning Event on the Sequence that names the refusal and the
// fix, not only in its log.
func TestRefusedWaitJobIsReported(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "test-deny-wait-jobs-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"batch"}, APIVersions: []string{"*"}, Resources: []string{"jobs"}}}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "object.metadata.namespace != '" + ns + "' || !has(object.metadata.labels) || !('" + keys.WaitJobLabel + "' in object.metadata.labels)",
				Message:    "test: jobs need resource limits"}}}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
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
	// The policy works before the app comes (the API server loads it asynchronously).
	g.Eventually(func() error {
		return env.Client.Create(ctx, job(ns, "probe", map[string]string{keys.WaitJobLabel: "true"}), client.DryRunAll)
	}).
		WithTimeout(10 * time.Second).Should(MatchError(ContainSubstring("test: jobs need resource limits")))

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
