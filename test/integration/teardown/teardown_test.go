package teardown

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/mutate"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/sequence"
	"wavegate.io/wavegate/pkg/teardown"
)

// TestRaceExistsWithoutWavegate: outside an opted-in namespace, nothing orders the deletion: when
// the operator goes first (as `kubectl delete -f dir/` may do), its Widgets stay stuck on their
// finalizer. The same steps in an opted-in namespace end with nothing left.
func TestRaceExistsWithoutWavegate(t *testing.T) {
	for _, optedIn := range []bool{false, true} {
		t.Run(map[bool]string{false: "without wavegate", true: "with wavegate"}[optedIn], func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			a := install(t, namespace(t, optedIn), 2, nil)
			t.Cleanup(func() { a.unstick(t) })
			g.Expect(env.Client.Delete(ctx, a.operator)).To(Succeed())
			if !optedIn {
				g.Eventually(a.operatorPods).WithTimeout(timeout).Should(BeZero())
			}
			for _, w := range a.widgets {
				g.Expect(dyn.Resource(widgets).Namespace(a.ns).Delete(ctx, w.GetName(), metav1.DeleteOptions{})).To(Succeed())
			}
			if !optedIn {
				g.Consistently(a.widgetsLeft).WithTimeout(2*time.Second).Should(Equal(2), "the Widgets were finalized although the operator was gone")
				return
			}
			g.Eventually(a.widgetsLeft).WithTimeout(timeout).Should(BeZero())
			g.Eventually(a.operatorExists).WithTimeout(timeout).Should(BeFalse())
		})
	}
}

func TestBackgroundDeletionIsOrdered(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := install(t, namespace(t, true), 3, nil)
	op := &appsv1.Deployment{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(a.operator), op)).To(Succeed())
	g.Expect(op.Finalizers).To(ContainElement(keys.TeardownFinalizer))

	a.deleteAll(t, metav1.DeletePropagationBackground)
	g.Eventually(a.widgetsLeft).WithTimeout(timeout).Should(BeZero())
	g.Eventually(a.operatorExists).WithTimeout(timeout).Should(BeFalse())

	// The operator said what it waited for (Events are written asynchronously: wait for them).
	g.Eventually(func(g Gomega) []string {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs, client.InNamespace(a.ns))).To(Succeed())
		var notes []string
		for _, e := range evs.Items {
			if e.Regarding.Name == "operator" {
				notes = append(notes, e.Reason+": "+e.Note)
			}
		}
		return notes
	}).WithTimeout(timeout).Should(ContainElements(MatchRegexp(`^TeardownHeld: held until group instances is gone: \d objects remain$`),
		HavePrefix(teardown.ReasonTeardownReleased)))
}

// TestWidgetsAWidgetOwnsHoldTheOperator: Widget w0 owns Widget w0-part (its controller, as an
// operator's child resources are owned by the resource they were made for), which carries the
// same labels and the operator's finalizer, and whose cleanup takes 2 s. w0-part is no member, but
// the operator must outlive it as it does w0, or w0-part stays stuck on its finalizer: when
// `kubectl delete -f` of the app deletes the operator and w0 (the garbage collector deletes w0-part
// once w0 is gone), and when the namespace controller deletes everything at once.
func TestWidgetsAWidgetOwnsHoldTheOperator(t *testing.T) {
	for _, how := range []string{"delete -f", "namespace deletion"} {
		t.Run(how, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			a := install(t, namespace(t, true), 1, nil)
			t.Cleanup(func() { a.unstick(t) })
			part := widget(a.ns, "w0-part", map[string]any{keys.GroupLabel: "instances", keys.GroupOrderLabel: "2"})
			part.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Widget", Name: "w0",
				UID: a.widgets[0].GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}})
			part.SetAnnotations(map[string]string{cleanupSecondsAnnotation: "2"})
			part, err := dyn.Resource(widgets).Namespace(a.ns).Create(ctx, part, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(part.GetFinalizers()).NotTo(ContainElement(keys.TeardownFinalizer), "w0-part is no member")
			t.Cleanup(func() { (&app{ns: a.ns, widgets: []*unstructured.Unstructured{part}}).unstick(t) })

			if how == "namespace deletion" {
				deleteNamespace(t, a.ns) // fails the test if the namespace's content stays
				return
			}
			a.deleteAll(t, metav1.DeletePropagationBackground) // the operator and w0: w0-part is the garbage collector's
			g.Eventually(a.widgetsLeft).WithTimeout(timeout).Should(BeZero(), "w0-part is stuck: the operator went before it")
			g.Eventually(a.operatorExists).WithTimeout(timeout).Should(BeFalse())
		})
	}
}

// TestNamespaceDeletion deletes the namespace as the namespace controller does: every namespaced
// collection at once, the operator's pods and ReplicaSet included. The strict operator works only
// while its pod runs and is not terminating, so the Widgets are finalized only if wavegate keeps
// the pod, and what the operator needs (its ServiceAccount, in no group here, and its webhook's
// EndpointSlice); the refusals say what they wait for (the namespace controller reports them in
// the namespace's status).
func TestNamespaceDeletion(t *testing.T) {
	g := NewWithT(t)
	a := install(t, namespace(t, true), 2, nil)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "operator", Namespace: a.ns}} // in no group
	g.Expect(env.Client.Create(context.Background(), sa)).To(Succeed())
	// The EndpointSlice of the operator's webhook Service: it copies the Service's labels, group
	// operator's. Deleted, it could not be made again, and the webhook would have no endpoints.
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "operator-webhook-x1", Namespace: a.ns,
		Labels: map[string]string{keys.GroupLabel: "operator", keys.GroupOrderLabel: "1", discoveryv1.LabelServiceName: "operator-webhook"}},
		AddressType: discoveryv1.AddressTypeIPv4}
	g.Expect(env.Client.Create(context.Background(), slice)).To(Succeed())
	refused := deleteNamespace(t, a.ns)
	g.Expect(a.widgetsLeft(g)).To(BeZero())
	g.Expect(a.operatorExists(g)).To(BeFalse())
	// While the Widgets were there, the namespace controller's deletions of the operator's
	// workload, its pod and its ServiceAccount were refused, saying what they wait for.
	g.Expect(refused).To(HaveKeyWithValue("Deployment", MatchRegexp(`this Deployment of group "operator" stays until group\(s\) instances of sequence %q are gone`, a.ns)))
	g.Expect(refused).To(HaveKeyWithValue("Pod", ContainSubstring(`keeps running until group(s) instances of sequence %q are gone`, a.ns)))
	g.Expect(refused).To(HaveKeyWithValue("ServiceAccount", ContainSubstring("belongs to no group and stays, with the earliest groups of sequence %q", a.ns)))
	g.Expect(refused).To(HaveKeyWithValue("EndpointSlice", ContainSubstring(`this EndpointSlice of group "operator" stays until group(s) instances of sequence %q are gone`, a.ns)))
}

// TestNamespaceDeletionOfAKindTheLaterGroupsHaveToo: the namespace controller deletes each kind as
// one collection (the real API server's DeleteCollection, in name order) and stops at its first
// refusal. When the later group has a ServiceAccount too, the operator's (in no group, or in its
// group) is held only if that one is named before it: it is then deleted first, and the operator
// keeps its own until the Widgets are gone. Named after it, holding the operator's would hold it,
// and the hold itself: the operator's goes at once, and the namespace's deletion still completes.
// Nor is it held when a later member declares ServiceAccounts for cleanup: that member's deletion
// waits for every ServiceAccount of the namespace.
func TestNamespaceDeletionOfAKindTheLaterGroupsHaveToo(t *testing.T) {
	operatorGroup := map[string]string{keys.GroupLabel: "operator", keys.GroupOrderLabel: "1"}
	for _, tc := range []struct {
		name, later string
		// operator are the labels of the operator's ServiceAccount; cleanup is w0's cleanup annotation.
		operator map[string]string
		cleanup  string
		// refused is what the refusal of the operator's ServiceAccount says ("": none).
		refused string
	}{
		{name: "in no group, the later one named before it", later: "app", refused: "belongs to no group and stays, with the earliest groups of sequence %q"},
		{name: "in no group, the later one named after it", later: "web"},
		{name: "in its group, the later one named before it", later: "app", operator: operatorGroup,
			refused: `this ServiceAccount of group "operator" stays until group(s) instances of sequence %q are gone`},
		{name: "in its group, the later one named after it", later: "web", operator: operatorGroup},
		{name: "in no group, a later member cleans up ServiceAccounts", later: "app", cleanup: "serviceaccounts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			a := install(t, namespace(t, true), 2, nil)
			if tc.cleanup != "" {
				w0, err := dyn.Resource(widgets).Namespace(a.ns).Get(ctx, "w0", metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				w0.SetAnnotations(map[string]string{keys.CleanupAnnotation: tc.cleanup})
				_, err = dyn.Resource(widgets).Namespace(a.ns).Update(ctx, w0, metav1.UpdateOptions{})
				g.Expect(err).NotTo(HaveOccurred())
			}
			for _, sa := range []*corev1.ServiceAccount{
				{ObjectMeta: metav1.ObjectMeta{Name: "operator", Namespace: a.ns, Labels: tc.operator}},
				{ObjectMeta: metav1.ObjectMeta{Name: tc.later, Namespace: a.ns,
					Labels: map[string]string{keys.GroupLabel: "instances", keys.GroupOrderLabel: "2"}}},
			} {
				g.Expect(env.Client.Create(ctx, sa)).To(Succeed())
			}
			g.Eventually(func(g Gomega) []wavev1.GroupStatus {
				s := &wavev1.Sequence{}
				g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: a.ns}, s)).To(Succeed())
				return s.Status.Groups
			}).WithTimeout(timeout).Should(ContainElement(And(HaveField("Name", "instances"), HaveField("Resources", ContainElement("v1/serviceaccounts")))))
			refused := deleteNamespace(t, a.ns) // fails the test if the namespace's content stays
			g.Expect(a.widgetsLeft(g)).To(BeZero())
			if tc.refused != "" {
				g.Expect(refused).To(HaveKeyWithValue("ServiceAccount", ContainSubstring(tc.refused, a.ns)))
			} else {
				g.Expect(refused).NotTo(HaveKey("ServiceAccount"))
			}
		})
	}
}

// TestForegroundDeletionIsRefusedWhileLaterGroupsExist: foreground deletion would delete the
// operator's pods first whatever its finalizers, so it is refused (retryably) until the Widgets
// are gone, then allowed.
func TestForegroundDeletionIsRefusedWhileLaterGroupsExist(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := install(t, namespace(t, true), 1, nil)
	g.Eventually(func(g Gomega) int32 {
		s := &wavev1.Sequence{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: a.ns}, s)).To(Succeed())
		return int32(len(s.Status.Groups))
	}).WithTimeout(timeout).Should(BeEquivalentTo(2))

	err := env.Client.Delete(ctx, a.operator, client.PropagationPolicy(metav1.DeletePropagationForeground))
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring(`group "operator" of sequence "` + a.ns + `" is deleted after group(s) instances (1 objects remain)`))
	g.Expect(err.Error()).To(ContainSubstring("--cascade=background"))

	// Argo CD's order: the later wave (the Widget) first, then the operator, both foreground.
	fg := metav1.DeletePropagationForeground
	g.Expect(dyn.Resource(widgets).Namespace(a.ns).Delete(ctx, "w0", metav1.DeleteOptions{PropagationPolicy: &fg})).To(Succeed())
	g.Eventually(a.widgetsLeft).WithTimeout(timeout).Should(BeZero())
	// Argo CD deletes the next wave the moment the last one is gone from its cache, before
	// wavegate's Sequence status has caught up: the check confirms on a consistent read and allows it
	// at once.
	g.Expect(env.Client.Delete(ctx, a.operator, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	g.Eventually(a.operatorExists).WithTimeout(timeout).Should(BeFalse())
}

// TestForegroundDeletionWaitsForOwnedObjects: group instances has no member of its own, only a
// Widget that an unlabeled Widget owns (an operator's child resource, with its finalizer). It holds
// the operator as a member would: the Sequence status counts it, so the DELETE check refuses the
// operator's foreground deletion instead of letting the garbage collector stop the operator first.
func TestForegroundDeletionWaitsForOwnedObjects(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := install(t, namespace(t, true), 0, nil)
	parent, err := dyn.Resource(widgets).Namespace(a.ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "parent", "namespace": a.ns}}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	child := widget(a.ns, "child", map[string]any{keys.GroupLabel: "instances", keys.GroupOrderLabel: "2"})
	child.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Widget", Name: "parent", UID: parent.GetUID(), Controller: ptr.To(true)}})
	child, err = dyn.Resource(widgets).Namespace(a.ns).Create(ctx, child, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	a.widgets = append(a.widgets, child) // unstuck at the end
	t.Cleanup(func() { a.unstick(t) })
	g.Eventually(func(g Gomega) []wavev1.GroupStatus {
		s := &wavev1.Sequence{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: a.ns}, s)).To(Succeed())
		return s.Status.Groups
	}).WithTimeout(timeout).Should(ContainElement(And(HaveField("Name", "instances"), HaveField("Order", int32(2)), HaveField("Owned", int32(1)))))

	err = env.Client.Delete(ctx, a.operator, client.PropagationPolicy(metav1.DeletePropagationForeground))
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring(`is deleted after group(s) instances (1 objects remain)`))

	g.Expect(dyn.Resource(widgets).Namespace(a.ns).Delete(ctx, "child", metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(a.widgetsLeft).WithTimeout(timeout).Should(Equal(1), "the child was not finalized") // the parent stays
	g.Eventually(func() error {
		return env.Client.Delete(ctx, a.operator, client.PropagationPolicy(metav1.DeletePropagationForeground))
	}).WithTimeout(timeout).Should(Succeed())
}

// staleLater is a Sequence status that has not caught up: it says one Widget of group instances
// remains, whatever the API server holds.
type staleLater struct{}

func (staleLater) Later(string, int32) ([]string, int32, []string, bool) {
	return []string{"instances"}, 1, []string{members.ResourceString(widgets)}, true
}

func (staleLater) Spanning(string) []teardown.Span { return nil }

type optedIn struct{}

func (optedIn) Terminating(string) bool { return false }
func (optedIn) Labels(string) (map[string]string, error) {
	return map[string]string{keys.EnabledLabel: "true"}, nil
}

// TestDeleteCheckConfirmsOnAConsistentRead drives the DELETE check with a Sequence status that
// lags the API server: it refuses a foreground deletion of the operator only while a Widget of the
// later group really exists.
func TestDeleteCheckConfirmsOnAConsistentRead(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	s := &mutate.DeleteServer{Policies: policy.NewStaticStore(&policy.Index{}), Check: &teardown.Check{Later: staleLater{}, Namespaces: optedIn{},
		Metadata: metadata.NewForConfigOrDie(env.Config)}}
	review := func() *admissionv1.AdmissionResponse {
		body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",` +
			`"kind":{"group":"apps","version":"v1","kind":"Deployment"},"resource":{"group":"apps","version":"v1","resource":"deployments"},` +
			`"namespace":"` + ns + `","operation":"DELETE","userInfo":{"username":"argocd"},"options":{"propagationPolicy":"Foreground"},` +
			`"oldObject":{"metadata":{"name":"operator","namespace":"` + ns + `","labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1"}}}}}`
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, mutate.DeletePath, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(rec, req)
		var out admissionv1.AdmissionReview
		g.Expect(json.Unmarshal(rec.Body.Bytes(), &out)).To(Succeed())
		g.Expect(out.Response).NotTo(BeNil())
		return out.Response
	}
	first := review()
	g.Expect(first.Allowed).To(BeTrue(), "no Widget exists: the stale status must not refuse: %+v", first.Result)

	w := widget(ns, "w0", map[string]any{keys.GroupLabel: "instances", keys.GroupOrderLabel: "2"})
	w.SetFinalizers(nil)
	_, err := dyn.Resource(widgets).Namespace(ns).Create(ctx, w, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	resp := review()
	g.Expect(resp.Allowed).To(BeFalse(), "a Widget of the later group exists")
	g.Expect(resp.Result.Code).To(BeEquivalentTo(http.StatusConflict))
	g.Expect(resp.Result.Message).To(ContainSubstring("group(s) instances (1 objects remain)"))

	// A Widget of another namespace's sequence does not count.
	g.Expect(dyn.Resource(widgets).Namespace(ns).Delete(ctx, "w0", metav1.DeleteOptions{})).To(Succeed())
	other := widget(namespace(t, true), "w1", map[string]any{keys.GroupLabel: "instances", keys.GroupOrderLabel: "2"})
	other.SetFinalizers(nil)
	_, err = dyn.Resource(widgets).Namespace(other.GetNamespace()).Create(ctx, other, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool { return review().Allowed }).WithTimeout(timeout).Should(BeTrue())
}

// TestDeclaredCleanupKinds: the operator declares that Widgets, even ones created by users outside
// Git (no group label), must be deleted and gone before it goes.
func TestDeclaredCleanupKinds(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := install(t, namespace(t, true), 0, map[string]string{keys.CleanupAnnotation: "widgets.example.com"})
	_, err := dyn.Resource(widgets).Namespace(a.ns).Create(ctx, widget(a.ns, "user-made", nil), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(env.Client.Delete(ctx, a.operator)).To(Succeed())
	g.Eventually(a.widgetsLeft).WithTimeout(timeout).Should(BeZero())
	g.Eventually(a.operatorExists).WithTimeout(timeout).Should(BeFalse())
}

// TestDeclaredCleanupStaysWithinItsReach: the cleanup annotation is written by whoever may label a
// member, a tenant of its namespace say, while the deletions are the manager's. A cluster-scoped kind
// (Gadgets) is cleaned up only for a sequence that a WavePolicy declares clusterScoped, and
// wavegate's own kinds never: the Gadget and another namespace's Sequence survive, the member goes
// without waiting, and a Warning Event says why.
func TestDeclaredCleanupStaysWithinItsReach(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	other := install(t, namespace(t, true), 0, nil)
	otherSeq := &wavev1.Sequence{}
	g.Eventually(func() error {
		return env.Client.Get(ctx, client.ObjectKey{Name: sequence.ObjectName(other.ns)}, otherSeq)
	}).WithTimeout(timeout).Should(Succeed())

	ns := namespace(t, true)
	victim := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "victim-" + ns}}}
	_, err := dyn.Resource(gadgets).Create(ctx, victim, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = dyn.Resource(gadgets).Delete(ctx, victim.GetName(), metav1.DeleteOptions{}) })
	victimLeft := func() error {
		_, err := dyn.Resource(gadgets).Get(ctx, victim.GetName(), metav1.GetOptions{})
		return err
	}
	a := install(t, ns, 0, map[string]string{keys.CleanupAnnotation: "gadgets.example.com, sequences.wavegate.io"})

	g.Expect(env.Client.Delete(ctx, a.operator)).To(Succeed())
	g.Eventually(a.operatorExists).WithTimeout(timeout).Should(BeFalse())
	g.Expect(victimLeft()).To(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(otherSeq), otherSeq)).To(Succeed())
	g.Expect(otherSeq.DeletionTimestamp).To(BeNil())
	g.Eventually(func(g Gomega) []string {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
		var refused []string
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == teardown.ReasonCleanupRefused {
				refused = append(refused, e.Note)
			}
		}
		return refused
	}).WithTimeout(timeout).Should(ContainElement(And(ContainSubstring("gadgets.example.com: a cluster-scoped kind"),
		ContainSubstring("sequences.wavegate.io: wavegate's own kinds are never cleaned up"))))

	// Declared clusterScoped by a WavePolicy, which tenants cannot write: the same cleanup runs.
	ns2 := namespace(t, true)
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "gpu-" + ns2}, Spec: wavev1.WavePolicySpec{
		Sequences: []wavev1.SharedSequence{{Name: ns2, ClusterScoped: true}}}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	b := install(t, ns2, 0, map[string]string{keys.CleanupAnnotation: "gadgets.example.com"})
	g.Expect(env.Client.Delete(ctx, b.operator)).To(Succeed())
	g.Eventually(victimLeft).WithTimeout(timeout).Should(Satisfy(apierrors.IsNotFound))
	g.Eventually(b.operatorExists).WithTimeout(timeout).Should(BeFalse())
}

// TestTimeoutAndForcedRemoval: a declared cleanup object that no operator finalizes holds the
// operator until the timeout; then a Warning, and, only because the policy opts in, its finalizers
// are removed with loud Events.
func TestTimeoutAndForcedRemoval(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "force-" + ns}, Spec: wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{
		{Name: "op-" + ns, Order: 1, Timeout: &metav1.Duration{Duration: 2 * time.Second}, ForceRemoveFinalizers: new(true)}}}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	op := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: ns, Labels: map[string]string{keys.GroupLabel: "op-" + ns},
		Annotations: map[string]string{keys.CleanupAnnotation: "widgets.example.com"}}}
	g.Eventually(func() error { return env.Client.Create(ctx, op) }).WithTimeout(timeout).Should(Succeed())
	g.Expect(op.Finalizers).To(ContainElement(keys.TeardownFinalizer))
	// A Widget with a finalizer nobody will ever remove.
	stuck := widget(ns, "stuck", nil)
	stuck.SetFinalizers([]string{"example.com/never"})
	_, err := dyn.Resource(widgets).Namespace(ns).Create(ctx, stuck, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(env.Client.Delete(ctx, op)).To(Succeed())
	g.Eventually(func() error { return env.Client.Get(ctx, client.ObjectKeyFromObject(op), op) }).WithTimeout(timeout).
		Should(Satisfy(apierrors.IsNotFound))
	g.Eventually(func(g Gomega) []string {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
		var warnings []string
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning {
				warnings = append(warnings, e.Reason)
			}
		}
		return warnings
	}).WithTimeout(timeout).Should(ContainElements(teardown.ReasonTeardownTimeout, teardown.ReasonFinalizersForced))
}
