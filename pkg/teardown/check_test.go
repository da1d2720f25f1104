package teardown

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/utils/ptr"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
)

// TestConfirmCountsObjectsWhoseGroupStopsResolving: the consistent read that confirms a refusal
// counts a later group's object whose labels do not resolve now at the place admission stamped on
// it, as the hold does; one with nothing stamped (never admitted as a member) is not counted, nor
// one of a namespace that may not join the sequence, whatever its annotations say.
func TestConfirmCountsObjectsWhoseGroupStopsResolving(t *testing.T) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	cm := func(namespace, name string, annotations map[string]string) runtime.Object {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
				Labels: map[string]string{keys.GroupLabel: "crs", keys.SequenceLabel: "shop"}, Annotations: annotations}}
	}
	stamp := map[string]string{keys.ResolvedSequenceAnnotation: "shop", keys.ResolvedGroupAnnotation: "crs", keys.ResolvedGroupOrderAnnotation: "2"}
	s := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(s); err != nil {
		t.Fatal(err)
	}
	// forged: another namespace's object naming the sequence with the same stamp, which its
	// namespace may not join.
	c := &Check{Metadata: metadatafake.NewSimpleMetadataClient(s,
		cm("shop", "stamped", stamp), cm("shop", "never-admitted", nil), cm("other", "forged", stamp))}
	groups, n, _, err := c.confirm(context.Background(), policy.Compile(nil), "shop", 1, []string{members.ResourceString(gvr)})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"crs"}, groups); d != "" || n != 1 {
		t.Errorf("later groups (-want +got):\n%s\nobjects %d, want 1", d, n)
	}
}

// TestConfirmCountsOwnedObjectsThatWaitForAFinalizer: an object a controller made (an operator's
// child resource) is no member, but one that carries someone else's finalizer counts in its group
// as a member does, unless it is made by a member of an earlier group (directly, or through objects
// that are no members): that member is held while it exists, and it is deleted only once that
// member is gone. One without a finalizer goes with its owner and counts for nothing.
func TestConfirmCountsOwnedObjectsThatWaitForAFinalizer(t *testing.T) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	cm := func(name string, order string, owner string, finalizers ...string) runtime.Object {
		o := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID(name), Finalizers: finalizers,
				Labels: map[string]string{keys.GroupLabel: "g" + order, keys.GroupOrderLabel: order}}}
		if owner != "" {
			o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner, UID: types.UID(owner), Controller: ptr.To(true)}}
		}
		return o
	}
	s := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := &Check{Metadata: metadatafake.NewSimpleMetadataClient(s,
		cm("operator", "1", "", keys.TeardownFinalizer),
		cm("resource", "2", "", keys.TeardownFinalizer),
		cm("child", "2", "resource", "example.com/cleanup"),
		cm("child-without-finalizer", "2", "resource"),
		cm("child-with-only-wavegates", "2", "resource", keys.TeardownFinalizer),
		cm("operators-own", "2", "operator", "example.com/cleanup"),
		// Made by the operator through an object that is no member (its StatefulSet's claim).
		cm("operators-statefulset", "1", "operator"),
		cm("its-claim", "2", "operators-statefulset", "kubernetes.io/pvc-protection"))}
	groups, n, _, err := c.confirm(context.Background(), policy.Compile(nil), "shop", 1, []string{members.ResourceString(gvr)})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"g2"}, groups); d != "" || n != 2 {
		t.Errorf("later groups (-want +got):\n%s\nobjects %d, want 2 (resource and child)", d, n)
	}
}

// TestHoldsNothingAfter: the namespace controller's deletion of an object of a kind that the later
// groups have objects of too may be refused only when no object it would keep (one of its kind
// named after it, not yet being deleted) belongs to a later group or to another sequence. Read from
// the real API server's name order in test/integration/teardown (TestNamespaceDeletion...).
func TestHoldsNothingAfter(t *testing.T) {
	sa := func(name string, labels map[string]string, deleting bool) runtime.Object {
		o := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: labels}}
		if deleting {
			o.DeletionTimestamp = &metav1.Time{}
			o.Finalizers = []string{keys.TeardownFinalizer}
		}
		return o
	}
	group := func(name, order string) map[string]string {
		return map[string]string{keys.GroupLabel: name, keys.GroupOrderLabel: order}
	}
	other := map[string]string{keys.GroupLabel: "app", keys.GroupOrderLabel: "0", keys.SequenceLabel: "shop.other"}
	s := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		// order is where the deleted object ("operator") stands in sequence shop.
		order int32
		want  bool
	}{
		{name: "a later group's object named before it", order: 1, want: true,
			objects: []runtime.Object{sa("app", group("instances", "2"), false)}},
		{name: "a later group's object named after it", order: 1, want: false,
			objects: []runtime.Object{sa("web", group("instances", "2"), false)}},
		{name: "a later group's object named after it, being deleted already", order: 1, want: true,
			objects: []runtime.Object{sa("web", group("instances", "2"), true)}},
		{name: "objects in no group, and of its own or an earlier group, named after it", order: 1, want: true,
			objects: []runtime.Object{sa("zz-default", nil, false), sa("operator-2", group("operator", "1"), false), sa("p", group("crds", "0"), false)}},
		{name: "another sequence's object named after it, even of an earlier order", order: 1, want: false,
			objects: []runtime.Object{sa("web", other, false)}},
		{name: "the earliest group's object in no group: a later group's named after it", order: 0, want: false,
			objects: []runtime.Object{sa("operator-2", group("operator", "1"), false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Check{Metadata: metadatafake.NewSimpleMetadataClient(s, append(tc.objects, sa("operator", group("operator", "1"), false))...)}
			d := Deletion{Namespace: "shop", Name: "operator", Version: "v1", Resource: schema.GroupResource{Resource: "serviceaccounts"}}
			after := c.afterIt(context.Background(), policy.Compile(nil), d)()
			if got := holdsNothingAfter(after, policy.Compile(nil), d, nil, "shop", tc.order); got != tc.want {
				t.Errorf("holdsNothingAfter = %v, want %v (objects after it: %d)", got, tc.want, len(after))
			}
		})
	}
	// Unreadable: nothing is held.
	if holdsNothingAfter(nil, policy.Compile(nil), Deletion{}, nil, "shop", 1) {
		t.Error("holdsNothingAfter(nil) = true, want false")
	}
}
