package teardown

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
)

type allOptedIn struct{}

func (allOptedIn) OptedIn(context.Context, string) bool             { return true }
func (allOptedIn) Labels(context.Context, string) map[string]string { return nil }

// TestOneFailedReleaseDoesNotStopTheOthers: an object whose finalizer cannot be removed (the API
// server refuses the patch) does not keep the sequence's other objects stranded: each is released,
// and the failure is returned for a retry.
func TestOneFailedReleaseDoesNotStopTheOthers(t *testing.T) {
	kind := members.Kind{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespaced: true}
	// Labels that no longer name a valid group: ordering cannot apply, the finalizer goes at once.
	cm := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetNamespace("shop")
		u.SetName(name)
		u.SetLabels(map[string]string{keys.GroupLabel: "not a group!"})
		u.SetFinalizers([]string{keys.TeardownFinalizer})
		return u
	}
	names := []string{"refused", "a", "b"}
	var objs []members.Object
	var tracked []runtime.Object
	for _, n := range names {
		objs = append(objs, members.Object{Kind: kind, Unstructured: cm(n)})
		tracked = append(tracked, cm(n))
	}
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), tracked...)
	dyn.PrependReactor("patch", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.PatchAction).GetName() == "refused" {
			return true, nil, apierrors.NewForbidden(kind.GVR.GroupResource(), "refused", nil)
		}
		return false, nil, nil
	})
	h := &Holder{Tracker: &members.Tracker{Dynamic: dyn}}
	_, err := h.Reconcile(context.Background(), "shop", objs, policy.Compile(nil), allOptedIn{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("Reconcile returned %v, want the refused patch's error", err)
	}
	got := map[string][]string{}
	for _, n := range names {
		cur, err := dyn.Resource(kind.GVR).Namespace("shop").Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got[n] = cur.GetFinalizers()
	}
	want := map[string][]string{"refused": {keys.TeardownFinalizer}, "a": {}, "b": {}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("finalizers (-want +got):\n%s", d)
	}
}
