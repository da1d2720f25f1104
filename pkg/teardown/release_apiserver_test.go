package teardown_test

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/teardown"
	"wavegate.io/wavegate/test/framework"
)

// TestReleaseActsOnlyOnTheObjectDecidedOn, against a real API server. A release decided on an
// object that has since been deleted and created again under its name leaves the new one its
// finalizer (its own deletion is ordered in its turn). A release the API server refuses (here an
// admission policy, whose refusal is a 422 like a failed JSON-patch test) is an error, retried,
// with the finalizer kept: taken for a failed test, it was dropped, and nothing reconciled the
// object again.
func TestReleaseActsOnlyOnTheObjectDecidedOn(t *testing.T) {
	env, err := framework.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	c := env.Client
	const ns = "release-uid"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	kind := members.Kind{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespaced: true}
	cms := dynamic.NewForConfigOrDie(env.Config).Resource(kind.GVR).Namespace(ns)
	h := &teardown.Holder{Client: c, Tracker: &members.Tracker{Dynamic: dynamic.NewForConfigOrDie(env.Config)}}
	create := func(name string) *unstructured.Unstructured {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Finalizers: []string{keys.TeardownFinalizer}}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: u}
	}
	finalizers := func(name string) (types.UID, []string) {
		t.Helper()
		cur, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cur.GetUID(), cur.GetFinalizers()
	}

	// Decided on, then deleted and made again under its name.
	old := create("recreated")
	if err := c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "recreated", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Patch(ctx, "recreated", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cms.Get(ctx, "recreated", metav1.GetOptions{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatal(err)
	}
	recreated := create("recreated")
	if err := h.Release(ctx, members.Object{Kind: kind, Unstructured: old}, "test"); err != nil {
		t.Errorf("releasing the object decided on, gone: %v", err)
	}
	if uid, fin := finalizers("recreated"); uid != recreated.GetUID() || len(fin) != 1 {
		t.Errorf("the object made again under its name: UID %s (want %s), finalizers %v (want %s)", uid, recreated.GetUID(), fin, keys.TeardownFinalizer)
	}

	// Refused by an admission policy: every update of the ConfigMap "refused".
	refused := create("refused")
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "refuse-updates"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.metadata.name != 'refused'", Message: "refused"}}}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "refuse-updates"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "refuse-updates",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// In force once an update is refused.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cms.Patch(ctx, "refused", types.MergePatchType, []byte(`{"metadata":{"labels":{"probe":"x"}}}`), metav1.PatchOptions{})
		return apierrors.IsInvalid(err), nil
	}); err != nil {
		t.Fatalf("the admission policy never refused an update: %v", err)
	}
	if err := h.Release(ctx, members.Object{Kind: kind, Unstructured: refused}, "test"); !apierrors.IsInvalid(err) {
		t.Errorf("a refused release returned %v, want the refusal", err)
	}
	if _, fin := finalizers("refused"); len(fin) != 1 {
		t.Errorf("finalizers of the refused release: %v, want %s", fin, keys.TeardownFinalizer)
	}
}
