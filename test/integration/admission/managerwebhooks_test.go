package admission

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"wavegate.io/wavegate/pkg/patch"
)

// TestManagerChangesItsWebhooksOnlyAsItMakesThem: config/rbac's manager-webhooks policy holds the
// manager's updates of its own webhook configurations to what it does with them: an entry added as
// a copy of a base entry (its own name, object selector and one more match condition), changed in
// its selector, removed. A stolen manager token cannot point an entry at another URL (the objects
// the webhook sees would go there), turn its failure policy to Ignore, widen its rules or drop a
// match condition; each refusal names the entry.
func TestManagerChangesItsWebhooksOnlyAsItMakesThem(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	mgr := asManager(g)
	// The manager's own configuration, by the name config/default gives it (the suite's webhooks
	// are installed by envtest under other names), with an entry that matches nothing.
	never := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "example.com/never", Operator: metav1.LabelSelectorOpExists}}}
	base := admissionregistrationv1.ValidatingWebhook{
		Name:                    "objects.wavegate.io",
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/validate"), CABundle: []byte("ca")},
		Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}},
		FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		ObjectSelector:          never,
		MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "not-the-manager", Expression: "true"}},
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "wavegate-validating-webhook-configuration"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{base}}
	g.Expect(env.Client.Create(ctx, cfg)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cfg) })
	entry := func(path string) string { return "/webhooks/0/" + path }

	// The API server loads a policy a moment after it is created.
	g.Eventually(func() error {
		return jsonPatch(g, mgr, cfg, patch.Add(entry("clientConfig/url"), "https://attacker.example.com/review"))
	}).WithTimeout(10 * time.Second).Should(MatchError(ContainSubstring("not " + base.Name)))
	g.Expect(jsonPatch(g, mgr, cfg, patch.Add(entry("failurePolicy"), "Ignore"))).To(MatchError(ContainSubstring("not " + base.Name)))
	g.Expect(jsonPatch(g, mgr, cfg, patch.Add(entry("rules/0/operations"), []string{"*"}))).To(MatchError(ContainSubstring("not " + base.Name)))
	g.Expect(jsonPatch(g, mgr, cfg, patch.Remove(entry("matchConditions/0")))).To(MatchError(ContainSubstring("not " + base.Name)))
	copied := base.DeepCopy()
	copied.Name = "copied.wavegate.io"
	copied.ClientConfig.URL = ptr.To("https://attacker.example.com/review")
	g.Expect(jsonPatch(g, mgr, cfg, patch.Add("/webhooks/-", copied))).To(MatchError(ContainSubstring("not copied.wavegate.io")),
		"a copy pointed elsewhere")

	// What the manager does: a copy with its own name, selector and one more condition; its
	// selector changes; its CA bundle changes; the copy goes.
	copied = base.DeepCopy()
	copied.Name = "label.example.com.wavegate.io"
	copied.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "example.com/never-tier", Operator: metav1.LabelSelectorOpExists}}}
	copied.MatchConditions = append(copied.MatchConditions, admissionregistrationv1.MatchCondition{Name: "more", Expression: "true"})
	g.Expect(jsonPatch(g, mgr, cfg, patch.Add("/webhooks/-", copied))).To(Succeed())
	g.Expect(cfg.Webhooks).To(HaveLen(2))
	g.Expect(jsonPatch(g, mgr, cfg, patch.Add("/webhooks/1/objectSelector/matchExpressions/0/key", "example.com/never-layer"))).To(Succeed())
	g.Expect(jsonPatch(g, mgr, cfg, patch.Add("/webhooks/0/clientConfig/caBundle", []byte("rotated")))).To(Succeed())
	g.Expect(jsonPatch(g, mgr, cfg, patch.Remove("/webhooks/1"))).To(Succeed())
	g.Expect(cfg.Webhooks).To(HaveLen(1))
}
