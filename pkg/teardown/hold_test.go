package teardown

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
)

// configMaps is the kind of the ConfigMaps the tests hold.
var configMaps = members.Kind{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
	GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespaced: true}

// configMap is a ConfigMap of namespace shop as the cache shows it (its UID its name), with
// wavegate's finalizer and then the others named, deleted long ago when deleted.
func configMap(name string, labels, annotations map[string]string, deleted bool, finalizers ...string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace("shop")
	u.SetName(name)
	u.SetUID(types.UID(name))
	u.SetLabels(labels)
	u.SetAnnotations(annotations)
	u.SetFinalizers(append([]string{keys.TeardownFinalizer}, finalizers...))
	if deleted {
		u.SetDeletionTimestamp(&metav1.Time{Time: time.Unix(1, 0)})
	}
	return u
}

type allOptedIn struct{}

func (allOptedIn) OptedIn(context.Context, string) bool             { return true }
func (allOptedIn) Labels(context.Context, string) map[string]string { return nil }

// TestOneFailedReleaseDoesNotStopTheOthers: an object whose finalizer cannot be removed (the API
// server refuses the patch) does not keep the sequence's other objects stranded: each is released,
// and the failure is returned for a retry.
func TestOneFailedReleaseDoesNotStopTheOthers(t *testing.T) {
	kind := configMaps
	// Deleted, with labels that no longer name a valid group: ordering cannot apply, the finalizer
	// goes at once.
	cm := func(name string) *unstructured.Unstructured {
		return configMap(name, map[string]string{keys.GroupLabel: "not a group!"}, nil, true)
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

// TestPolicyChurnKeepsTheFinalizer: a member whose group stops resolving for a while (its policy
// deleted and applied again, say, so that the group has no order in between) keeps its finalizer
// while it is not deleted: admission would add it back only on a change to the object, so a release
// would lose its teardown order for good. A deleted one is released (it cannot be ordered), and so
// is one whose labels name no group at all (a policy's group label no longer named): nothing would
// show it to the hold again.
func TestPolicyChurnKeepsTheFinalizer(t *testing.T) {
	kind := configMaps
	cm := func(name string, labels map[string]string, deleted bool) *unstructured.Unstructured {
		return configMap(name, labels, nil, deleted, "other")
	}
	noOrder := map[string]string{keys.GroupLabel: "db"} // its order came from the policy now gone
	cms := []*unstructured.Unstructured{
		cm("live", noOrder, false),
		cm("deleted", noOrder, true),
		cm("no-group", map[string]string{"app.kubernetes.io/component": "db"}, false),
	}
	var objs []members.Object
	var tracked []runtime.Object
	for _, u := range cms {
		objs = append(objs, members.Object{Kind: kind, Unstructured: u})
		tracked = append(tracked, u.DeepCopy())
	}
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), tracked...)
	h := &Holder{Tracker: &members.Tracker{Dynamic: dyn}}
	if _, err := h.Reconcile(context.Background(), "shop", objs, policy.Compile(nil), allOptedIn{}); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, u := range cms {
		cur, err := dyn.Resource(kind.GVR).Namespace("shop").Get(context.Background(), u.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got[u.GetName()] = cur.GetFinalizers()
	}
	want := map[string][]string{"live": {keys.TeardownFinalizer, "other"}, "deleted": {"other"}, "no-group": {"other"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("finalizers (-want +got):\n%s", d)
	}
}

func TestCleanupRefused(t *testing.T) {
	idx := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: wavev1.WavePolicySpec{
		Sequences: []wavev1.SharedSequence{{Name: "gpu", ClusterScoped: true}, {Name: "shared"}}}}})
	gadgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	sequences := schema.GroupVersionResource{Group: keys.Domain, Version: "v1alpha1", Resource: "sequences"}
	cases := map[string]struct {
		gvr        schema.GroupVersionResource
		namespaced bool
		ns, seq    string
		refused    bool
	}{
		"namespaced kind, own namespace's sequence":            {widgets, true, "shop", "shop", false},
		"cluster-scoped kind, own namespace's sequence":        {gadgets, false, "shop", "shop", true},
		"cluster-scoped kind, sequence shared among tenants":   {gadgets, false, "shop", "shared", true},
		"cluster-scoped kind, sequence declared clusterScoped": {gadgets, false, "shop", "gpu", false},
		"wavegate's own kind, even clusterScoped":              {sequences, false, "shop", "gpu", true},
		// A cluster-scoped member has no namespace to clean up in: its list would reach them all.
		"namespaced kind, cluster-scoped member":                    {widgets, true, "", "gpu", true},
		"cluster-scoped kind, cluster-scoped member, clusterScoped": {gadgets, false, "", "gpu", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := cleanupRefused(tc.gvr, tc.namespaced, tc.ns, tc.seq, idx) != ""; got != tc.refused {
				t.Errorf("refused = %v, want %v", got, tc.refused)
			}
		})
	}
}

func TestWavegateMade(t *testing.T) {
	cases := map[string]struct {
		labels map[string]string
		want   bool
	}{
		"a user's Job":    {map[string]string{"app": "x"}, false},
		"a wait Job":      {map[string]string{keys.WaitJobLabel: "true"}, true},
		"a waiter's Role": {map[string]string{keys.WaiterRBACLabel: "true"}, true},
		"no labels":       {nil, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := wavegateMade(&metav1.ObjectMeta{Labels: tc.labels}); got != tc.want {
				t.Errorf("wavegateMade = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestObjectsWhoseGroupStopsResolvingStillHold: a custom resource of a later group whose labels do
// not resolve for a while (its group's order came from a policy being applied again) still exists,
// and holds the deleted operator of an earlier group, at the group order admission stamped on it:
// released, the operator would go and leave the resource stuck on its finalizer. Once the resource
// is gone, the operator goes: an object of another namespace that names the sequence and forges
// the stamp holds nothing.
func TestObjectsWhoseGroupStopsResolvingStillHold(t *testing.T) {
	kind := configMaps
	obj := configMap
	operator := obj("operator", map[string]string{keys.GroupLabel: "op", keys.GroupOrderLabel: "1"}, nil, true)
	resource := obj("resource", map[string]string{keys.GroupLabel: "crs"}, // no order: its policy is gone for now
		map[string]string{keys.ResolvedSequenceAnnotation: "shop", keys.ResolvedGroupAnnotation: "crs", keys.ResolvedGroupOrderAnnotation: "2"}, false)
	// A tenant's object in another namespace that names the sequence and forges the stamp: its
	// namespace may not join the sequence, so it places nothing (it would hold shop's teardown).
	forged := obj("forged", map[string]string{keys.GroupLabel: "crs", keys.SequenceLabel: "shop"},
		map[string]string{keys.ResolvedSequenceAnnotation: "shop", keys.ResolvedGroupAnnotation: "crs", keys.ResolvedGroupOrderAnnotation: "2"}, false)
	forged.SetNamespace("other")
	for _, withResource := range []bool{true, false} {
		objs := []members.Object{{Kind: kind, Unstructured: operator.DeepCopy()}, {Kind: kind, Unstructured: forged.DeepCopy()}}
		tracked := []runtime.Object{operator.DeepCopy(), forged.DeepCopy()}
		if withResource {
			objs = append(objs, members.Object{Kind: kind, Unstructured: resource.DeepCopy()})
			tracked = append(tracked, resource.DeepCopy())
		}
		dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), tracked...)
		shop := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{keys.EnabledLabel: "true"}}}
		// The consistent read finds nothing (the tracker tracks no kind here).
		h := &Holder{Client: fake.NewClientBuilder().WithObjects(shop).Build(),
			Tracker: &members.Tracker{Dynamic: dyn, GroupLabels: func() []string { return []string{keys.GroupLabel} }}}
		_, err := h.Reconcile(context.Background(), "shop", objs, policy.Compile(nil), allOptedIn{})
		cur, gerr := dyn.Resource(kind.GVR).Namespace("shop").Get(context.Background(), "operator", metav1.GetOptions{})
		if gerr != nil {
			t.Fatal(gerr)
		}
		held := HasFinalizer(cur)
		if withResource && (err != nil || !held) {
			t.Errorf("with the resource: error %v, operator held %v; want it held", err, held)
		}
		if !withResource && (err != nil || held) {
			t.Errorf("without the resource: error %v, operator held %v; want it released", err, held)
		}
	}
}

// TestLaterClaimsTheHeldWorkloadMountsDoNotHoldIt: a deleted workload of group 1 whose pods mount a
// claim of group 2 is not held for that claim: the claim's pvc-protection finalizer waits for the
// pods, which the garbage collector deletes only once the workload is gone. Any other later object,
// a claim the pods do not mount among them, still holds it.
func TestLaterClaimsTheHeldWorkloadMountsDoNotHoldIt(t *testing.T) {
	deployments := members.Kind{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
		GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Namespaced: true}
	statefulSets := members.Kind{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"},
		GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, Namespaced: true}
	claims := members.Kind{GVR: claimsGVR, GVK: schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}, Namespaced: true}
	earlier := map[string]string{keys.GroupLabel: "backup", keys.GroupOrderLabel: "1"}
	later := map[string]string{keys.GroupLabel: "data", keys.GroupOrderLabel: "2"}
	object := func(kind members.Kind, name string, labels map[string]string, deleted bool) *unstructured.Unstructured {
		u := configMap(name, labels, nil, deleted)
		u.SetAPIVersion(kind.GVK.GroupVersion().String())
		u.SetKind(kind.GVK.Kind)
		return u
	}
	workload := func(kind members.Kind, spec map[string]any) *unstructured.Unstructured {
		u := object(kind, "backup", earlier, true)
		u.Object["spec"] = spec
		return u
	}
	mounts := func(claim string) map[string]any {
		return map[string]any{"template": map[string]any{"spec": map[string]any{"volumes": []any{
			map[string]any{"name": "tmp", "emptyDir": map[string]any{}},
			map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": claim}}}}}}
	}
	cases := map[string]struct {
		kind     members.Kind
		spec     map[string]any
		claim    string
		wantHeld bool
	}{
		"a Deployment mounting the claim":                  {deployments, mounts("data"), "data", false},
		"a Deployment mounting another claim":              {deployments, mounts("scratch"), "data", true},
		"a StatefulSet's claim from its template":          {statefulSets, map[string]any{"volumeClaimTemplates": []any{map[string]any{"metadata": map[string]any{"name": "data"}}}}, "data-backup-0", false},
		"another StatefulSet's claim of the same template": {statefulSets, map[string]any{"volumeClaimTemplates": []any{map[string]any{"metadata": map[string]any{"name": "data"}}}}, "data-backupx-0", true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			held, claim := workload(tc.kind, tc.spec), object(claims, tc.claim, later, false)
			objs := []members.Object{{Kind: tc.kind, Unstructured: held.DeepCopy()}, {Kind: claims, Unstructured: claim.DeepCopy()}}
			dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), held.DeepCopy(), claim.DeepCopy())
			shop := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{keys.EnabledLabel: "true"}}}
			// The consistent read finds nothing (the tracker tracks no kind here).
			h := &Holder{Client: fake.NewClientBuilder().WithObjects(shop).Build(),
				Tracker: &members.Tracker{Dynamic: dyn, GroupLabels: func() []string { return []string{keys.GroupLabel} }}}
			if _, err := h.Reconcile(context.Background(), "shop", objs, policy.Compile(nil), allOptedIn{}); err != nil {
				t.Fatal(err)
			}
			cur, err := dyn.Resource(tc.kind.GVR).Namespace("shop").Get(context.Background(), "backup", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := HasFinalizer(cur); got != tc.wantHeld {
				t.Errorf("held = %v, want %v", got, tc.wantHeld)
			}
		})
	}
}
