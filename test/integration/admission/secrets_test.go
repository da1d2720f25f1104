package admission

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/mutate"
	"wavegate.io/wavegate/test/framework"
)

// webhookRequests is how many admission reviews wavegate's webhook server has answered on path.
func webhookRequests(g Gomega, path string) float64 {
	families, err := crmetrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	n := 0.0
	for _, f := range families {
		if f.GetName() == "controller_runtime_webhook_requests_total" {
			n += framework.CounterSum(f, map[string]string{"webhook": path})
		}
	}
	return n
}

// TestWebhooksNeverSeeSecrets: a Secret labeled as a group member (a chart's common labels put the
// group label on everything) never reaches wavegate: not when it is created or changed, and not
// when it is deleted, where the review would carry its data as the old object. A ConfigMap with the
// same labels reaches both webhooks: the count can go up.
func TestWebhooksNeverSeeSecrets(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	member := labels(keys.GroupLabel, "db", keys.GroupOrderLabel, "1")
	foreground := client.PropagationPolicy(metav1.DeletePropagationForeground)

	for _, tc := range []struct {
		obj  client.Object
		seen bool
	}{
		{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns, Labels: member}, StringData: map[string]string{"password": "s3cret"}}, false},
		{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns, Labels: member}, Data: map[string]string{"k": "v"}}, true},
	} {
		mutating, validating := webhookRequests(g, mutate.Path), webhookRequests(g, mutate.DeletePath)
		g.Expect(env.Client.Create(ctx, tc.obj)).To(Succeed())
		g.Expect(env.Client.Delete(ctx, tc.obj, foreground)).To(Succeed())
		if tc.seen {
			g.Expect(webhookRequests(g, mutate.Path)).To(BeNumerically(">", mutating), "the ConfigMap's creation reaches the mutating webhook")
			g.Expect(webhookRequests(g, mutate.DeletePath)).To(BeNumerically(">", validating), "the ConfigMap's deletion reaches the teardown webhook")
		} else {
			g.Expect(webhookRequests(g, mutate.Path)).To(Equal(mutating), "a Secret's creation reached the mutating webhook")
			g.Expect(webhookRequests(g, mutate.DeletePath)).To(Equal(validating), "a Secret's deletion reached the teardown webhook")
		}
	}
}
