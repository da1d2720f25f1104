//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"wavegate.io/wavegate/pkg/webhookconfig"
)

// TestManagerKeepsItsLabelEntriesUnderItsPolicy: the manager, running as its ServiceAccount, adds a
// webhook entry for a policy's group label to both of its webhook configurations and removes it
// with the policy, and config/rbac's manager-webhooks policy (which refuses its other changes to
// them: TestManagerChangesItsWebhooksOnlyAsItMakesThem) lets it. The policy selects no namespace.
func TestManagerKeepsItsLabelEntriesUnderItsPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const label = "e2e.wavegate.io/tier"
	f := applyYAML(t, `apiVersion: wavegate.io/v1alpha1
kind: WavePolicy
metadata: {name: e2e-label-entries}
spec:
  namespaceSelector: {matchLabels: {e2e.wavegate.io/none: "true"}}
  groupLabel: `+label+"\n")
	t.Cleanup(func() { run(t, "delete", "-f", f, "--ignore-not-found") })
	entries := func(g Gomega) (mutating, validating []string) {
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "wavegate-mutating-webhook-configuration", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		for _, w := range m.Webhooks {
			mutating = append(mutating, w.Name)
		}
		v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "wavegate-validating-webhook-configuration", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		for _, w := range v.Webhooks {
			validating = append(validating, w.Name)
		}
		return mutating, validating
	}
	entry := webhookconfig.EntryName(label)
	g.Eventually(func(g Gomega) {
		m, v := entries(g)
		g.Expect(m).To(ContainElement(entry))
		g.Expect(v).To(ContainElement(entry))
	}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "the manager did not add the label entries")
	run(t, "delete", "-f", f)
	g.Eventually(func(g Gomega) {
		m, v := entries(g)
		g.Expect(m).NotTo(ContainElement(entry))
		g.Expect(v).NotTo(ContainElement(entry))
	}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "the manager did not remove the label entries")
}
