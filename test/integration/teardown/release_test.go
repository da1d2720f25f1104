package teardown

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
)

func finalizers(a *app) func(g Gomega) []string {
	return func(g Gomega) []string {
		d := &appsv1.Deployment{}
		g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(a.operator), d)).To(Succeed())
		return d.Finalizers
	}
}

// TestNamespaceOptOutReleasesFinalizers: a namespace that leaves wavegate keeps no wavegate
// finalizer, so nothing is stranded there.
func TestNamespaceOptOutReleasesFinalizers(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := install(t, namespace(t, true), 1, nil)
	g.Expect(finalizers(a)(g)).To(ContainElement(keys.TeardownFinalizer))
	ns := &corev1.Namespace{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: a.ns}, ns)).To(Succeed())
	patch := client.MergeFrom(ns.DeepCopy())
	delete(ns.Labels, keys.EnabledLabel)
	g.Expect(env.Client.Patch(ctx, ns, patch)).To(Succeed())
	g.Eventually(finalizers(a)).WithTimeout(timeout).ShouldNot(ContainElement(keys.TeardownFinalizer))
}

// TestPolicyTurningTeardownOffReleasesFinalizers.
func TestPolicyTurningTeardownOffReleasesFinalizers(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "off-" + ns}, Spec: wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: "cfg-" + ns, Order: 1}}}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: ns, Labels: map[string]string{keys.GroupLabel: "cfg-" + ns}}}
	g.Eventually(func() error { return env.Client.Create(ctx, cm) }).WithTimeout(timeout).Should(Succeed())
	g.Expect(cm.Finalizers).To(ContainElement(keys.TeardownFinalizer))

	// A merge patch of the spec: the status controller writes the same object concurrently.
	g.Expect(env.Client.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"defaults":{"teardown":"Disabled"}}}`)))).To(Succeed())
	g.Eventually(func(g Gomega) []string {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		return cm.Finalizers
	}).WithTimeout(timeout).ShouldNot(ContainElement(keys.TeardownFinalizer))
	// And deletion is immediate.
	g.Expect(env.Client.Delete(ctx, cm)).To(Succeed())
}

// TestLeavingTheGroupReleasesTheFinalizer: a member whose group label is removed (`kubectl label
// deploy operator wavegate.io/group-`, an apply that drops it) loses wavegate's finalizer in that
// same update, before or during its deletion, so its deletion completes although a later group
// still has objects. The member tracker selects objects by their group labels and never sees such
// an object again: without admission releasing it, it stayed Terminating forever.
func TestLeavingTheGroupReleasesTheFinalizer(t *testing.T) {
	unlabel := func(g Gomega, obj client.Object, label string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, label)
		g.Expect(env.Client.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
	}
	t.Run("before its deletion", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		a := install(t, namespace(t, true), 1, nil)
		t.Cleanup(func() { a.unstick(t) })
		g.Expect(finalizers(a)(g)).To(ContainElement(keys.TeardownFinalizer))

		op := &appsv1.Deployment{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(a.operator), op)).To(Succeed())
		unlabel(g, op, keys.GroupLabel)
		g.Expect(op.Labels).NotTo(HaveKey(keys.GroupLabel))
		g.Expect(op.Finalizers).NotTo(ContainElement(keys.TeardownFinalizer), "the update that removed the group label kept the finalizer")

		// No longer a member: nothing holds it for the Widget of the later group.
		g.Expect(env.Client.Delete(ctx, op)).To(Succeed())
		g.Eventually(a.operatorExists).WithTimeout(timeout).Should(BeFalse())
		g.Expect(a.widgetsLeft(g)).To(Equal(1))
	})
	t.Run("while it is held", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		a := install(t, namespace(t, true), 1, nil)
		t.Cleanup(func() { a.unstick(t) })
		g.Expect(env.Client.Delete(ctx, a.operator)).To(Succeed())
		op := &appsv1.Deployment{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(a.operator), op)).To(Succeed())
		g.Expect(op.DeletionTimestamp).NotTo(BeNil())
		g.Expect(op.Finalizers).To(ContainElement(keys.TeardownFinalizer), "held until the Widget is gone")

		unlabel(g, op, keys.GroupLabel)
		g.Eventually(a.operatorExists).WithTimeout(timeout).Should(BeFalse())
		g.Expect(a.widgetsLeft(g)).To(Equal(1))
	})
	t.Run("a policy's group label", func(t *testing.T) {
		// The policy's label has its own webhook entry (pkg/webhookconfig), which selects objects
		// with that label: on an UPDATE the API server matches the old object too, so the entry
		// sees the label's removal.
		g := NewWithT(t)
		ctx := context.Background()
		ns := namespace(t, true)
		const tier = "teardown.example.com/tier"
		p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "tier-" + ns}, Spec: wavev1.WavePolicySpec{
			GroupLabel: tier, Groups: []wavev1.GroupSpec{{Name: "db", Order: 1}}}}
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
		cm := func() *corev1.ConfigMap {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, Labels: map[string]string{tier: "db"}}}
		}
		g.Eventually(func(g Gomega) []string { // once the label's entry and the policy are in place
			c := cm()
			g.Expect(env.Client.Create(ctx, c, client.DryRunAll)).To(Succeed())
			return c.Finalizers
		}).WithTimeout(timeout).Should(ContainElement(keys.TeardownFinalizer))
		c := cm()
		g.Expect(env.Client.Create(ctx, c)).To(Succeed())
		g.Expect(c.Finalizers).To(ContainElement(keys.TeardownFinalizer))

		unlabel(g, c, tier)
		g.Expect(c.Finalizers).NotTo(ContainElement(keys.TeardownFinalizer), "the update that removed the policy's group label kept the finalizer")
		g.Expect(env.Client.Delete(ctx, c)).To(Succeed())
		g.Expect(apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(c), c))).To(BeTrue(), "the deletion did not complete")
	})
}

// TestDroppingAPolicyGroupLabelReleasesTheFinalizer: when a policy stops naming its group label
// (deleted, or naming another label), the objects grouped only by that label are no members any
// more and lose wavegate's finalizer, a held one among them, although the member tracker stops
// watching that label: nothing reaches admission for them any more (the label's webhook entry goes
// too), so the tracker keeps the label's informers until the hold has released them.
func TestDroppingAPolicyGroupLabelReleasesTheFinalizer(t *testing.T) {
	for name, drop := range map[string]func(g Gomega, p *wavev1.WavePolicy){
		"the policy is deleted": func(g Gomega, p *wavev1.WavePolicy) {
			g.Expect(env.Client.Delete(context.Background(), p)).To(Succeed())
		},
		"the policy names another label": func(g Gomega, p *wavev1.WavePolicy) {
			patch := fmt.Sprintf(`{"spec":{"groupLabel":%q}}`, "other."+p.Spec.GroupLabel)
			g.Expect(env.Client.Patch(context.Background(), p, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := namespace(t, true)
			tier := "teardown.example.com/" + ns
			p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "tier-" + ns}, Spec: wavev1.WavePolicySpec{
				GroupLabel: tier, Groups: []wavev1.GroupSpec{{Name: "db", Order: 1}, {Name: "web", Order: 2}}}}
			g.Expect(env.Client.Create(ctx, p)).To(Succeed())
			t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
			cm := func(name, group string) *corev1.ConfigMap {
				return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{tier: group}}}
			}
			g.Eventually(func(g Gomega) []string { // once the label's entry and the policy are in place
				c := cm("db", "db")
				g.Expect(env.Client.Create(ctx, c, client.DryRunAll)).To(Succeed())
				return c.Finalizers
			}).WithTimeout(timeout).Should(ContainElement(keys.TeardownFinalizer))
			db, web := cm("db", "db"), cm("web", "web")
			for _, c := range []*corev1.ConfigMap{db, web} {
				g.Expect(env.Client.Create(ctx, c)).To(Succeed())
				g.Expect(c.Finalizers).To(ContainElement(keys.TeardownFinalizer))
			}
			// db is held while web exists.
			g.Expect(env.Client.Delete(ctx, db)).To(Succeed())
			g.Consistently(func(g Gomega) []string {
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(db), db)).To(Succeed())
				return db.Finalizers
			}).WithTimeout(time.Second).Should(ContainElement(keys.TeardownFinalizer))

			drop(g, p)
			g.Eventually(func() bool {
				return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(db), db))
			}).WithTimeout(timeout).Should(BeTrue(), "the held ConfigMap stayed Terminating")
			g.Eventually(func(g Gomega) []string {
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(web), web)).To(Succeed())
				return web.Finalizers
			}).WithTimeout(timeout).ShouldNot(ContainElement(keys.TeardownFinalizer))
			g.Expect(env.Client.Delete(ctx, web)).To(Succeed())
			g.Expect(apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(web), web))).To(BeTrue(), "the deletion did not complete")
		})
	}
}
