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
	"wavegate.io/wavegate/pkg/webhookconfig"
)

// TestManagerChangesItsWebhooksOnlyAsItMakesThem: config/rbac's manager-webhooks policy holds the
// manager's updates of its own webhook configurations to what it does with them: a label entry
// added as webhookconfig derives it from a base entry, CA bundles set, the label entry removed. A
// stolen manager token cannot point an entry at another URL (the objects the webhook sees would go
// there), turn its failure policy to Ignore, widen its rules or selector, rename or remove a base
// entry, drop a match condition, or add an entry that is not such a copy; each refusal names the
// entry.
func TestManagerChangesItsWebhooksOnlyAsItMakesThem(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	mgr := asManager(g)
	// The manager's own configuration, by the name config/default gives it (the suite's webhooks
	// are installed by envtest under other names), with an entry that matches nothing.
	never := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "example.com/never", Operator: metav1.LabelSelectorOpExists}}}
	base := admissionregistrationv1.ValidatingWebhook{
		Name:                    webhookconfig.BaseValidatingWebhookName,
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
	g.Expect(jsonPatch(g, mgr, cfg, patch.Add(entry("objectSelector"), map[string]any{}))).To(MatchError(ContainSubstring("not "+base.Name)),
		"the base entry widened to every object")
	g.Expect(jsonPatch(g, mgr, cfg, patch.Add(entry("name"), "renamed.wavegate.io"))).To(MatchError(ContainSubstring("not renamed.wavegate.io")))
	g.Expect(jsonPatch(g, mgr, cfg, patch.Remove("/webhooks/0"))).To(MatchError(ContainSubstring("only label entries, not " + base.Name)))

	// What the manager does: a label entry as webhookconfig derives it from the base entry.
	derived, err := webhookconfig.ValidatingWebhooks([]admissionregistrationv1.ValidatingWebhook{base}, []string{"example.com/tier"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(derived).To(HaveLen(2))
	label := derived[1]
	for name, bad := range map[string]func(w *admissionregistrationv1.ValidatingWebhook){
		"pointed elsewhere": func(w *admissionregistrationv1.ValidatingWebhook) {
			w.ClientConfig.URL = ptr.To("https://attacker.example.com/review")
		},
		"not a label entry name": func(w *admissionregistrationv1.ValidatingWebhook) { w.Name = "copied.wavegate.io" },
		"selecting every object": func(w *admissionregistrationv1.ValidatingWebhook) { w.ObjectSelector = &metav1.LabelSelector{} },
		"with its rules widened": func(w *admissionregistrationv1.ValidatingWebhook) {
			w.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
		},
		"without the base's match condition": func(w *admissionregistrationv1.ValidatingWebhook) { w.MatchConditions = w.MatchConditions[1:] },
	} {
		w := label.DeepCopy()
		bad(w)
		g.Expect(jsonPatch(g, mgr, cfg, patch.Add("/webhooks/-", w))).To(MatchError(ContainSubstring("not "+w.Name)), "a label entry %s", name)
	}
	g.Expect(jsonPatch(g, mgr, cfg, patch.Add("/webhooks/-", label))).To(Succeed())
	g.Expect(cfg.Webhooks).To(HaveLen(2))
	g.Expect(jsonPatch(g, mgr, cfg, patch.Add("/webhooks/0/clientConfig/caBundle", []byte("rotated")), patch.Add("/webhooks/1/clientConfig/caBundle", []byte("rotated")))).To(Succeed())
	g.Expect(jsonPatch(g, mgr, cfg, patch.Remove("/webhooks/1"))).To(Succeed())
	g.Expect(cfg.Webhooks).To(HaveLen(1))
}
