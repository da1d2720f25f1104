package admission

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/mutate"
	"wavegate.io/wavegate/test/framework"
)

// podUpdatesExcluded is how many UPDATEs the API server has left out of wavegate's mutating
// webhook by its match conditions (it counts each exclusion).
func podUpdatesExcluded(g Gomega) float64 {
	families, err := framework.APIServerMetrics(context.Background(), kubernetes.NewForConfigOrDie(env.Config))
	g.Expect(err).NotTo(HaveOccurred())
	return framework.CounterSum(families["apiserver_admission_match_condition_exclusions_total"],
		map[string]string{"name": "objects.wavegate.io", "operation": "UPDATE"})
}

// TestAdmittedPodsSkipTheWebhookOnUpdate: a member pod is labeled admitted when it is created, and
// its updates (a gate removal among them) then reach neither the webhook nor its match conditions:
// the object selector leaves them out first, so the API server converts no pod for CEL. Without
// the label, an update reaches the match conditions, which leave it out: the API server counts that
// exclusion (the count can move).
func TestAdmittedPodsSkipTheWebhookOnUpdate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: labels(keys.GroupLabel, "web", keys.GroupOrderLabel, "1")},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	g.Expect(pod.Labels).To(HaveKeyWithValue(keys.AdmittedLabel, "true"))
	label := func(key string, value any) {
		t.Helper()
		p, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: value}}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(env.Client.Patch(ctx, pod, client.RawPatch("application/merge-patch+json", p))).To(Succeed())
	}

	// The count is the webhook's, for every object: wait until the manager's work on other tests'
	// namespaces (finalizers released as they are deleted) has stopped reaching it, and its
	// sequences are not held (an earlier test's CRD holds them for a while, and the passes held
	// back would run, and write, during the count).
	g.Eventually(func() bool {
		before := webhookRequests(g, mutate.Path)
		time.Sleep(500 * time.Millisecond)
		return mgr.Wavegate.Members.HasSynced() && webhookRequests(g, mutate.Path) == before
	}).WithTimeout(30 * time.Second).Should(BeTrue())
	calls, excluded := webhookRequests(g, mutate.Path), podUpdatesExcluded(g)
	label("team", "a")
	g.Expect(podUpdatesExcluded(g)).To(Equal(excluded), "an admitted pod's update reached the match conditions")
	label(keys.AdmittedLabel, nil)
	g.Expect(podUpdatesExcluded(g)).To(BeNumerically(">", excluded), "the update that removed the label was not left out by the match conditions")
	g.Expect(webhookRequests(g, mutate.Path)).To(Equal(calls), "a pod update reached the webhook")
}

// TestAdmittedLabelOnlyOnPods: any other object carrying wavegate.io/admitted in an opted-in
// namespace would skip the webhook, so the API server refuses it (config/webhook's admission
// policy), naming the label, and so is a cluster-scoped one; the update that removes it goes
// through, and outside opted-in namespaces the label means nothing.
func TestAdmittedLabelOnlyOnPods(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, elsewhere := namespace(t, true), namespace(t, false)
	marked := labels(keys.GroupLabel, "web", keys.GroupOrderLabel, "1", keys.AdmittedLabel, "true")
	// The API server loads a policy a moment after it is created.
	g.Eventually(func() error {
		return env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "settings-", Namespace: ns, Labels: marked}})
	}).WithTimeout(10 * time.Second).Should(MatchError(ContainSubstring("metadata.labels[wavegate.io/admitted]: only wavegate sets this label")))
	g.Expect(env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: elsewhere, Labels: marked}})).To(Succeed())
	// A cluster-scoped object has no namespace to opt in: it would reach the webhook, so it is refused too.
	g.Expect(env.Client.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "admitted-", Labels: marked}})).
		To(MatchError(ContainSubstring("metadata.labels[wavegate.io/admitted]")))

	// An object that got the label before the policy (created before wavegate was installed, say)
	// can lose it.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: elsewhere}}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	g.Expect(env.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: elsewhere}},
		client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"wavegate.io/enabled":"true"}}}`)))).To(Succeed())
	p, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{keys.AdmittedLabel: nil}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.Client.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", p))).To(Succeed())
	g.Expect(cm.Labels).NotTo(HaveKey(keys.AdmittedLabel))
}
