package members

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	discoveryfake "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"wavegate.io/wavegate/pkg/keys"
)

// preferredResources is a fake discovery that serves fixed resources (the client-go fake serves
// none from ServerPreferredResources).
type preferredResources struct {
	*discoveryfake.FakeDiscovery
	lists []*metav1.APIResourceList
}

func (p preferredResources) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return p.lists, nil
}

func configMap(name string, labels map[string]string, finalizers ...string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace("shop")
	u.SetName(name)
	u.SetLabels(labels)
	u.SetFinalizers(finalizers)
	return u
}

// TestRefreshKeepsADroppedLabelUntilItsObjectsAreReleased: when no policy names a group label any
// more, its informers stop, except while they hold an object that carries wavegate's teardown
// finalizer and no group label still tracked: the hold must see it to release it (its sequence is
// woken), and nothing else would show it.
func TestRefreshKeepsADroppedLabelUntilItsObjectsAreReleased(t *testing.T) {
	const tier, component = "example.com/tier", "app.kubernetes.io/component"
	cases := map[string]struct {
		obj *unstructured.Unstructured
		// after are the group labels once the policy changed (before: every one of the object's).
		after []string
		// wantKept are the labels whose informers run afterwards, sorted.
		wantKept  []string
		wantWoken []string
	}{
		"grouped only by the dropped label, with the finalizer": {
			obj: configMap("db", map[string]string{tier: "db"}, keys.TeardownFinalizer), after: []string{keys.GroupLabel},
			wantKept: []string{tier, keys.GroupLabel}, wantWoken: []string{"shop"},
		},
		"grouped only by the dropped label, without the finalizer": {
			obj: configMap("db", map[string]string{tier: "db"}, "other"), after: []string{keys.GroupLabel},
			wantKept: []string{keys.GroupLabel},
		},
		"still grouped by another policy's label": {
			obj:   configMap("db", map[string]string{tier: "db", component: "db"}, keys.TeardownFinalizer),
			after: []string{keys.GroupLabel, component}, wantKept: []string{component, keys.GroupLabel},
		},
		"in a sequence of its own": {
			obj:   configMap("db", map[string]string{tier: "db", keys.SequenceLabel: "shop.db"}, keys.TeardownFinalizer),
			after: []string{keys.GroupLabel}, wantKept: []string{tier, keys.GroupLabel}, wantWoken: []string{"shop.db"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{configMaps: "ConfigMapList"}, tc.obj)
			labels := []string{keys.GroupLabel, tier, component}
			var mu sync.Mutex
			var woken []string
			wokenNow := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(woken) }
			tr := &Tracker{
				Dynamic: dyn,
				Discovery: preferredResources{FakeDiscovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}},
					lists: []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
						{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"list", "watch"}}}}}},
				GroupLabels: func() []string { return labels },
				OnChange:    func(seq string) { mu.Lock(); defer mu.Unlock(); woken = append(woken, seq) },
				informers:   map[informerKey]*tracked{},
			}
			if err := tr.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			woken = nil // the initial list
			mu.Unlock()
			labels = tc.after
			if err := tr.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantKept, tr.trackedLabels()); diff != "" {
				t.Errorf("informers kept (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWoken, wokenNow()); diff != "" {
				t.Errorf("sequences woken (-want,+got):\n%s", diff)
			}
			if len(tc.wantWoken) == 0 {
				return
			}
			// The hold sees it among the members, and releases it; then the informer stops.
			if got := tr.Members(tc.wantWoken[0]); len(got) != 1 || got[0].GetName() != tc.obj.GetName() {
				t.Fatalf("members of %s: %v, want %s", tc.wantWoken[0], got, tc.obj.GetName())
			}
			released := tc.obj.DeepCopy()
			released.SetFinalizers(nil)
			if _, err := dyn.Resource(configMaps).Namespace("shop").Update(ctx, released, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			// A later refresh (the periodic one) stops it once the informer has seen the release.
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				err := tr.Refresh(ctx)
				return !slices.Contains(tr.trackedLabels(), tier), err
			}); err != nil {
				t.Fatalf("the informers of %s still run after their last object was released: %v", tier, err)
			}
		})
	}
}

// trackedLabels returns the labels the tracker runs informers for, sorted.
func (t *Tracker) trackedLabels() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []string
	for key := range t.informers {
		out = append(out, key.label)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestServes: a resource discovery serves is known to the tracker whether or not the manager may
// watch it; one discovery does not serve (a CRD not Established yet) is not.
func TestServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := &Tracker{
		Dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{configMaps: "ConfigMapList"}),
		Discovery: preferredResources{FakeDiscovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}},
			lists: []*metav1.APIResourceList{
				{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"list", "watch"}}}},
				{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: []string{"list", "watch"}}}},
			}},
		CanWatch:    func(group, _ string) bool { return group == "" },
		GroupLabels: func() []string { return []string{keys.GroupLabel} },
		informers:   map[informerKey]*tracked{},
	}
	if err := tr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for gr, want := range map[schema.GroupResource]bool{
		{Resource: "configmaps"}:                    true,
		{Group: "example.com", Resource: "widgets"}: true,
		{Group: "example.com", Resource: "gadgets"}: false,
	} {
		if got := tr.Serves(gr); got != want {
			t.Errorf("Serves(%s) = %v, want %v", gr, got, want)
		}
	}
}
