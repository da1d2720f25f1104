package admission

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/patch"
	"wavegate.io/wavegate/pkg/sequence"
	"wavegate.io/wavegate/test/framework"
)

// TestManagerUpdatesOnlyFinalizersAndItsGate: the manager's roles let it patch pods and every member
// kind cluster-wide (RBAC cannot say which fields); config/rbac's manager-updates policy refuses,
// for its ServiceAccount, every change to the content of an object it did not make but removing
// its teardown finalizer (any finalizer of an object being deleted) and a pod's wavegate.io/ordered
// gate: a stolen manager token cannot change what a tenant's workload runs. Labels and annotations
// are left to other products' admission, but for the labels that make an object the manager's
// own. Its own objects (wait Jobs) it changes as they work. Each refusal names what was changed.
func TestManagerUpdatesOnlyFinalizersAndItsGate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	mgr := asManager(g)
	ns := namespace(t, false)
	patchAs := func(c client.Client, o client.Object, ops ...patch.Operation) error {
		return jsonPatch(g, c, o, ops...)
	}

	labels := map[string]string{"app": "web"}
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Finalizers: []string{keys.TeardownFinalizer, "example.com/keep"},
			Annotations: map[string]string{keys.ResolvedGroupAnnotation: "web", "team": "a"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}}}},
	}
	g.Expect(env.Client.Create(ctx, web)).To(Succeed())
	t.Cleanup(func() {
		_ = patchAs(env.Client, web, patch.Remove("/metadata/finalizers"))
	})
	// The API server loads a policy a moment after it is created.
	g.Eventually(func() error {
		return patchAs(mgr, web, patch.Add("/spec/template/spec/containers/0/image", "attacker:1"))
	}).WithTimeout(10 * time.Second).Should(MatchError(ContainSubstring("not their spec")))
	g.Expect(patchAs(mgr, web, patch.Add("/metadata/ownerReferences", []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap",
		Name: "gone", UID: "4f9c6a5e-0000-4000-8000-000000000000"}}))).
		To(MatchError(ContainSubstring("not their metadata.ownerReferences")), "an owner that does not exist: the garbage collector would delete web")
	g.Expect(patchAs(mgr, web, patch.Add("/metadata/finalizers/-", "example.com/block"))).
		To(MatchError(ContainSubstring("not add them")))
	g.Expect(patchAs(mgr, web, patch.TestAndRemove("/metadata/finalizers", 1, "example.com/keep")...)).
		To(MatchError(ContainSubstring("only from an object being deleted")))
	// Labels and annotations another product's admission may change in the manager's request.
	g.Expect(patchAs(mgr, web, patch.Add("/metadata/annotations/team", "b"))).To(Succeed())
	g.Expect(patchAs(mgr, web, patch.TestAndRemove("/metadata/finalizers", 0, keys.TeardownFinalizer)...)).To(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(web), web)).To(Succeed())
	g.Expect(web.Finalizers).To(Equal([]string{"example.com/keep"}))
	g.Expect(web.Spec.Template.Spec.Containers[0].Image).To(Equal("web:1"))

	other := corev1.PodSchedulingGate{Name: "example.com/hold"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: keys.SchedulingGate}, other},
			Containers: []corev1.Container{{Name: "web", Image: "web:1"}}}}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	g.Expect(patchAs(mgr, pod, patch.Remove("/spec/schedulingGates/1"))).
		To(MatchError(ContainSubstring("only by removing its scheduling gate wavegate.io/ordered")))
	g.Expect(patchAs(mgr, pod, patch.Add("/spec/containers/0/image", "attacker:1"))).
		To(MatchError(ContainSubstring("only by removing its scheduling gate wavegate.io/ordered")))
	g.Expect(sequence.HasGate(pod)).To(BeTrue())
	g.Expect(patchAs(mgr, pod, patch.TestAndRemove("/spec/schedulingGates", 0, map[string]string{"name": keys.SchedulingGate})...)).To(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
	g.Expect(pod.Spec.SchedulingGates).To(Equal([]corev1.PodSchedulingGate{other}))

	config := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Data: map[string]string{"url": "https://db"}}
	g.Expect(env.Client.Create(ctx, config)).To(Succeed())
	g.Expect(patchAs(mgr, config, patch.Add("/data/url", "https://attacker"))).To(MatchError(ContainSubstring("not their data")))

	// A wait Job is the manager's own: it arms and disarms it. A tenant's Job is not.
	// In wavegate's namespace: the owned-labels policy refuses a wait Job in one not opted in.
	own := waitJob(framework.WavegateNamespace, "wavegate-wait-web", sequence.WaiterServiceAccount)
	own.Spec.Suspend = ptr.To(true)
	tenant := waitJob(ns, "migrate", "default")
	tenant.Labels = nil
	tenant.Spec.Suspend = ptr.To(true)
	for _, j := range []*batchv1.Job{own, tenant} {
		g.Expect(env.Client.Create(ctx, j)).To(Succeed())
	}
	g.Expect(patchAs(mgr, own, patch.Add("/spec/activeDeadlineSeconds", 600))).To(Succeed())
	g.Expect(patchAs(mgr, tenant, patch.Add("/spec/activeDeadlineSeconds", 1))).To(MatchError(ContainSubstring("not their spec")))
	g.Expect(patchAs(mgr, tenant, patch.Add("/metadata/labels", map[string]string{keys.WaitJobLabel: "true"}))).
		To(MatchError(MatchRegexp(`as its own|metadata.labels\[wavegate.io/wait-job\]: only wavegate sets this label`)),
			"a tenant's Job made the manager's own by a label (refused by this policy and, in a namespace not opted in, by owned-labels: the API server names one)")
	// An object being deleted is left out: a deleted object stuck on another product's finalizer (its
	// controller gone) is let go, also when another product's admission changes it in that request.
	stuck := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: ns, Finalizers: []string{"example.com/gone"}},
		Data: map[string]string{"url": "https://db"}}
	g.Expect(env.Client.Create(ctx, stuck)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, stuck)).To(Succeed())
	g.Expect(patchAs(mgr, stuck, patch.Add("/data/injected", "by-a-mutating-policy"), patch.Remove("/metadata/finalizers"))).To(Succeed())
}

// TestManagersWritesSkipTheWebhook: the objects webhook is not called for the manager's own writes
// (config/webhook's not-by-the-manager condition). Its teardown removes a member's finalizer; a
// webhook call there was a round trip per finalizer, and what admission stamped in the same
// request (here: the finalizer put back on a member that keeps its group) was the manager's
// change, which the manager-updates policy refuses where it is not a finalizer's removal or
// wavegate's annotations.
func TestManagersWritesSkipTheWebhook(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	mgr := asManager(g)
	ns := namespace(t, true)
	// A member of an opted-in namespace: admission gives it the teardown finalizer, and would again
	// on any update that removes it.
	config := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns,
		Labels: map[string]string{keys.GroupLabel: "config", keys.GroupOrderLabel: "1"}}}
	g.Eventually(func() []string {
		c := config.DeepCopy()
		c.Name = ""
		c.GenerateName = "settings-"
		g.Expect(env.Client.Create(ctx, c)).To(Succeed())
		config = c
		return c.Finalizers
	}).WithTimeout(10 * time.Second).Should(ContainElement(keys.TeardownFinalizer))
	i := slices.Index(config.Finalizers, keys.TeardownFinalizer)
	g.Expect(jsonPatch(g, mgr, config, patch.TestAndRemove("/metadata/finalizers", i, keys.TeardownFinalizer)...)).To(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(config), config)).To(Succeed())
	g.Expect(config.Finalizers).NotTo(ContainElement(keys.TeardownFinalizer), "admission put back the finalizer the manager removed")
}

// jsonPatch sends ops to o as c (the manager, or the suite's admin) in one JSON patch.
func jsonPatch(g Gomega, c client.Client, o client.Object, ops ...patch.Operation) error {
	body, err := patch.Marshal(ops...)
	g.Expect(err).NotTo(HaveOccurred())
	return c.Patch(context.Background(), o, client.RawPatch(types.JSONPatchType, body))
}
