package ordering

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/sequence"
	"wavegate.io/wavegate/test/framework"
)

// gizmos is the kind TestAnUnavailableKindFreezesOnlyTheSequencesThatRecordedIt breaks.
var gizmos = schema.GroupVersionResource{Group: "unavailable.example.com", Version: "v1", Resource: "gizmos"}

// TestAnUnavailableKindFreezesOnlyTheSequencesThatRecordedIt: a kind whose LIST fails on the API
// server (here a CRD given a second, preferred version whose conversion webhook is down) stopped
// every sequence of every namespace while the tracker waited for it to sync. Now another
// namespace's sequence releases its pods as usual, and the sequences whose status records the kind
// are not planned on the rest of their members, which no longer show its objects: a later
// group's pods stay gated, an earlier group's deleted member stays held, and their status says why
// until the kind lists again.
func TestAnUnavailableKindFreezesOnlyTheSequencesThatRecordedIt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(env.Config)
	crd := gizmoCRD(t)
	gizmo := func(ns, name string, l map[string]string) {
		t.Helper()
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(gizmos.GroupVersion().String())
		u.SetKind("Gizmo")
		u.SetNamespace(ns)
		u.SetName(name)
		u.SetLabels(l)
		_, err := dyn.Resource(gizmos).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	records := func(seq, group string) {
		t.Helper()
		g.Eventually(func(g Gomega) []string {
			for _, gs := range sequenceStatus(g, seq).Status.Groups {
				if gs.Name == group {
					return gs.Resources
				}
			}
			return nil
		}).WithTimeout(timeout).Should(ContainElement(members.ResourceString(gizmos)))
	}

	// ordered: a Gizmo (not ready) in the first group, a Deployment whose pod waits for it after.
	ordered := namespace(t)
	gizmo(ordered, "db", member("database", 0))
	web := deployment(ordered, "web", member("web", 1))
	g.Expect(env.Client.Create(ctx, web)).To(Succeed())
	webPod := podOf(t, web, web.Spec.Template, "pod-template-hash", "v1")
	records(ordered, "database")
	// held: an operator (a ConfigMap stands in) first, its Gizmo after.
	held := namespace(t)
	operator := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "operator", Namespace: held, Labels: member("operator", 0)}}
	g.Expect(env.Client.Create(ctx, operator)).To(Succeed())
	g.Expect(operator.Finalizers).To(ContainElement(keys.TeardownFinalizer))
	gizmo(held, "cr", member("crs", 1))
	records(held, "crs")
	// released: a web group released (its template cleared for admission), a Gizmo after it.
	released := namespace(t)
	g.Expect(env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: released, Labels: member("database", 0)}})).To(Succeed())
	relWeb := deployment(released, "web", member("web", 1))
	g.Expect(env.Client.Create(ctx, relWeb)).To(Succeed())
	eventuallyUngated(t, podOf(t, relWeb, relWeb.Spec.Template, "pod-template-hash", "v1"))
	gizmo(released, "later", member("later", 2))
	records(released, "later")
	cleared := func(g Gomega) []string {
		for _, gs := range sequenceStatus(g, released).Status.Groups {
			if gs.Name == "web" {
				return gs.ClearedTemplates
			}
		}
		return nil
	}
	g.Eventually(cleared).WithTimeout(timeout).ShouldNot(BeEmpty())

	// The Gizmos' preferred version is now v2, which every LIST of a stored Gizmo converts to
	// through a webhook that is down.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			return err
		}
		v2 := *crd.Spec.Versions[0].DeepCopy()
		v2.Name, v2.Storage = "v2", false
		crd.Spec.Versions = append(crd.Spec.Versions[:1], v2)
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
				ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/convert")}}}
		return env.Client.Update(ctx, crd)
	})).To(Succeed())
	t.Cleanup(func() { restoreGizmoCRD(t, crd) })
	g.Eventually(func() []schema.GroupResource {
		var out []schema.GroupResource
		for gvr := range mgr.Wavegate.Members.Unavailable() {
			out = append(out, gvr.GroupResource())
		}
		return out
	}).WithTimeout(timeout).Should(ContainElement(gizmos.GroupResource()), "the tracker does not report the Gizmos unavailable")

	// Another namespace's sequence goes on.
	other := namespace(t)
	g.Expect(env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: other, Labels: member("database", 0)}})).To(Succeed())
	otherWeb := deployment(other, "web", member("web", 1))
	g.Expect(env.Client.Create(ctx, otherWeb)).To(Succeed())
	eventuallyUngated(t, podOf(t, otherWeb, otherWeb.Spec.Template, "pod-template-hash", "v1"))

	// Those that recorded the Gizmos wait. Without the Gizmos the first would release its web group
	// at once, and the second its operator: no later object would be left.
	g.Expect(env.Client.Delete(ctx, operator)).To(Succeed())
	newPod := podOf(t, web, web.Spec.Template, "pod-template-hash", "v1") // and a pass of the first
	expectGated(t, webPod, newPod)
	g.Consistently(func(g Gomega) []string {
		got := &corev1.ConfigMap{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(operator), got)).To(Succeed(), "the operator was released")
		return got.Finalizers
	}).WithTimeout(gatedWindow).WithPolling(100 * time.Millisecond).Should(ContainElement(keys.TeardownFinalizer))
	// A frozen sequence clears no template: the controller cannot tell whether an earlier group
	// changed (here the Gizmos could have), so a new pod of the released template waits too.
	g.Eventually(cleared).WithTimeout(timeout).Should(BeEmpty(), "a frozen sequence kept a template cleared")
	expectGated(t, podOf(t, relWeb, relWeb.Spec.Template, "pod-template-hash", "v1"))
	// And they say why, with a Warning Event.
	for _, seq := range []string{ordered, held} {
		g.Eventually(func(g Gomega) *metav1.Condition {
			return meta.FindStatusCondition(sequenceStatus(g, seq).Status.Conditions, "Ready")
		}).WithTimeout(timeout).Should(And(HaveField("Reason", sequence.ReasonKindUnavailable),
			HaveField("Message", And(ContainSubstring("gizmos.unavailable.example.com (group "),
				ContainSubstring("listing unavailable.example.com/v2/gizmos fails"), ContainSubstring("conversion webhook"),
				ContainSubstring("repair what serves it")))), "sequence %s", seq)
	}
	g.Eventually(func(g Gomega) []string {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs)).To(Succeed())
		var seqs []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Sequence" && e.Type == corev1.EventTypeWarning && e.Reason == sequence.ReasonKindUnavailable {
				seqs = append(seqs, e.Regarding.Name)
			}
		}
		return seqs
	}).WithTimeout(timeout).Should(ContainElements(sequence.ObjectName(ordered), sequence.ObjectName(held)))

	// The Gizmos list again: the sequences are planned again, on all their members.
	restoreGizmoCRD(t, crd)
	for _, seq := range []string{ordered, held} {
		g.Eventually(func(g Gomega) string {
			return meta.FindStatusCondition(sequenceStatus(g, seq).Status.Conditions, "Ready").Reason
		}).WithTimeout(timeout).Should(Equal("Waiting"), "sequence %s", seq)
	}
	expectGated(t, webPod, newPod)
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(operator), &corev1.ConfigMap{})).To(Succeed(), "the operator was released")
}

// gizmoCRD installs the Gizmos, one version, and waits until the member tracker tracks them.
func gizmoCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	g := NewWithT(t)
	crd := framework.SchemalessCRD(gizmos, "Gizmo", apiextensionsv1.NamespaceScoped)
	g.Expect(env.Client.Create(context.Background(), crd)).To(Succeed())
	g.Eventually(func() bool {
		return slices.ContainsFunc(mgr.Wavegate.Members.Kinds(), func(k members.Kind) bool { return k.GVR == gizmos })
	}).WithTimeout(timeout).Should(BeTrue(), "the member tracker does not track the Gizmos")
	return crd
}

// restoreGizmoCRD gives the Gizmos back their one version, and waits until they are available.
func restoreGizmoCRD(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			return err
		}
		crd.Spec.Versions = crd.Spec.Versions[:1]
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
		return env.Client.Update(ctx, crd)
	})).To(Succeed())
	g.Eventually(func() map[schema.GroupVersionResource]string { return mgr.Wavegate.Members.Unavailable() }).
		WithTimeout(timeout).Should(BeEmpty())
}
