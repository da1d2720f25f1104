package teardown

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
