package admission

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/mutate"
)

// TestDeploymentsReplicaSetsSkipTheWebhook: a ReplicaSet that a Deployment controls is not a member
// and its template is its Deployment's, admitted with it, so the API server does not call the
// webhook for it (one round trip fewer between a Deployment's apply and its first pod); its pods
// are still admitted and gated. A ReplicaSet of its own, or one another kind of controller made,
// still reaches the webhook: the count can go up.
func TestDeploymentsReplicaSetsSkipTheWebhook(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	member := labels(keys.GroupLabel, "web", keys.GroupOrderLabel, "1", "app", "web")
	replicaSet := func(owner *metav1.OwnerReference) *appsv1.ReplicaSet {
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", Namespace: ns, Labels: member},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: member},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}
		if owner != nil {
			rs.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		return rs
	}
	controller := func(apiVersion, kind string) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: "web", UID: "5a7e3c1e-0000-4000-8000-000000000001", Controller: ptr.To(true)}
	}
	for _, tc := range []struct {
		name  string
		owner *metav1.OwnerReference
		seen  bool
	}{
		{"a Deployment's", controller("apps/v1", "Deployment"), false},
		{"a bare one", nil, true},
		{"another controller's", controller("example.com/v1", "Rollout"), true},
		{"owned by a Deployment that is not its controller", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "5a7e3c1e-0000-4000-8000-000000000002"}, true},
	} {
		calls := webhookRequests(g, mutate.Path)
		rs := replicaSet(tc.owner)
		g.Expect(env.Client.Create(ctx, rs)).To(Succeed(), tc.name)
		if tc.seen {
			g.Expect(webhookRequests(g, mutate.Path)).To(BeNumerically(">", calls), "%s ReplicaSet did not reach the webhook", tc.name)
			g.Expect(rs.Annotations).To(HaveKeyWithValue(keys.ArgoCDSyncWaveAnnotation, "100"), tc.name)
		} else {
			g.Expect(webhookRequests(g, mutate.Path)).To(Equal(calls), "%s ReplicaSet reached the webhook", tc.name)
			g.Expect(rs.Annotations).NotTo(HaveKey(keys.ArgoCDSyncWaveAnnotation), tc.name)
		}
	}
	// Its pods are admitted: gated and stamped.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", Namespace: ns, Labels: member,
		OwnerReferences: []metav1.OwnerReference{*controller("apps/v1", "ReplicaSet")}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	g.Expect(pod.Spec.SchedulingGates).To(ContainElement(corev1.PodSchedulingGate{Name: keys.SchedulingGate}))
	g.Expect(pod.Labels).To(HaveKeyWithValue(keys.AdmittedLabel, "true"))
}
