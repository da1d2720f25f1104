package admission

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/test/framework"
)

// TestOwnedLabelsOnlyWhereWavegateWorks: the manager caches every Job labeled wavegate.io/wait-job,
// and every ServiceAccount, Role and RoleBinding labeled wavegate.io/waiter-rbac, cluster-wide. In
// a namespace that is neither opted in nor wavegate's own, anyone (here a cluster admin) is refused
// to create one, or to add the label, and the refusal names it; in an opted-in namespace and in
// wavegate's own they are made as before. An object that has the label already keeps it once its
// namespace opts out, through later updates.
func TestOwnedLabelsOnlyWhereWavegateWorks(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	optedIn, elsewhere := namespace(t, true), namespace(t, false)
	rbacLabel := map[string]string{keys.WaiterRBACLabel: "true"}

	// The API server loads a policy a moment after it is created.
	g.Eventually(func() error {
		return env.Client.Create(ctx, waitJob(elsewhere, "forged", "default"))
	}).WithTimeout(10 * time.Second).Should(MatchError(ContainSubstring("metadata.labels[wavegate.io/wait-job]: only wavegate sets this label")))
	g.Expect(env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: elsewhere, Labels: rbacLabel}})).
		To(MatchError(ContainSubstring("metadata.labels[wavegate.io/waiter-rbac]: only wavegate sets this label")))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: elsewhere, Labels: map[string]string{keys.WaitJobLabel: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
	g.Expect(env.Client.Create(ctx, pod)).To(MatchError(ContainSubstring("metadata.labels[wavegate.io/wait-job]")), "a pod (the manager caches wait Jobs' pods)")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: elsewhere}}
	g.Expect(env.Client.Create(ctx, sa)).To(Succeed(), "an object without the labels")
	sa.Labels = rbacLabel
	g.Expect(env.Client.Update(ctx, sa)).To(MatchError(ContainSubstring("metadata.labels[wavegate.io/waiter-rbac]")), "adding the label")

	for _, ns := range []string{optedIn, framework.WavegateNamespace} {
		g.Expect(env.Client.Create(ctx, waitJob(ns, "wait-"+optedIn, "default"))).To(Succeed(), "a wait Job in %s", ns)
		g.Expect(env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "wait-" + optedIn, Namespace: ns, Labels: rbacLabel}})).
			To(Succeed(), "the waiter's Role in %s", ns)
	}

	// The namespace opts out: its Role keeps the label through an update.
	n := &corev1.Namespace{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: optedIn}, n)).To(Succeed())
	delete(n.Labels, keys.EnabledLabel)
	g.Expect(env.Client.Update(ctx, n)).To(Succeed())
	g.Eventually(func() error { // once the API server's policy sees the namespace as it is now
		return env.Client.Create(ctx, waitJob(optedIn, "forged", "default"))
	}).WithTimeout(10 * time.Second).Should(MatchError(ContainSubstring("metadata.labels[wavegate.io/wait-job]")))
	role := &rbacv1.Role{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: optedIn, Name: "wait-" + optedIn}, role)).To(Succeed())
	role.Annotations = map[string]string{"example.com/touched": "true"}
	g.Expect(env.Client.Update(ctx, role)).To(Succeed(), "an update that keeps the label")
}
