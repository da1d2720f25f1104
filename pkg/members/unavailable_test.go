package members

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	discoveryfake "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"wavegate.io/wavegate/pkg/keys"
)

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

var (
	configMapList = &metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}}}}
	widgetList = &metav1.APIResourceList{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
		{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}}}}
	// groupDown is what discovery returns while the API service of example.com is down.
	groupDown = &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{
		{Group: "example.com", Version: "v1"}: errors.New("the server is currently unable to handle the request")}}
)

// changingDiscovery serves what a test sets, as ServerPreferredResources does: the lists it could
// discover, and an error for the groups it could not.
type changingDiscovery struct {
	*discoveryfake.FakeDiscovery
	mu    sync.Mutex
	lists []*metav1.APIResourceList
	err   error
}

func newDiscovery(lists ...*metav1.APIResourceList) *changingDiscovery {
	return &changingDiscovery{FakeDiscovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}, lists: lists}
}

func (d *changingDiscovery) set(err error, lists ...*metav1.APIResourceList) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lists, d.err = lists, err
}

func (d *changingDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lists, d.err
}

func widget(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Widget")
	u.SetNamespace("shop")
	u.SetName(name)
	u.SetLabels(map[string]string{keys.GroupLabel: "crs"})
	return u
}

// memberNames returns the names of a sequence's members, sorted, as kind/name.
func memberNames(tr *Tracker, seq string) []string {
	var out []string
	for _, o := range tr.Members(seq) {
		out = append(out, o.Kind.GVK.Kind+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

// TestAKindWhoseListFailsDoesNotHoldTheTracker: a kind whose LIST keeps failing (an aggregated API
// that is down, a CRD whose conversion webhook is down) never syncs. Refresh does not wait for it
// forever, HasSynced does not wait for it (which stopped every sequence of every namespace), and
// it is reported unavailable, with the error and the fix, until it lists again.
func TestAKindWhoseListFailsDoesNotHoldTheTracker(t *testing.T) {
	cases := map[string]struct {
		err  error
		want []string // in the reason
	}{
		"its conversion webhook is down": {
			err: apierrors.NewInternalError(errors.New(`conversion webhook for example.com/v1, Kind=Widget failed: Post "https://127.0.0.1:1/convert": connection refused`)),
			want: []string{"listing example.com/v1/widgets fails", "conversion webhook for example.com/v1, Kind=Widget failed",
				"repair what serves it (its APIService, or its CRD's conversion webhook or schema)"},
		},
		"access to it was revoked": {
			err:  apierrors.NewForbidden(widgets.GroupResource(), "", errors.New("RBAC: access denied")),
			want: []string{"listing example.com/v1/widgets fails", "grant list and watch on widgets.example.com with a ClusterRole labeled wavegate.io/aggregate-to-manager=true"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{configMaps: "ConfigMapList", widgets: "WidgetList"},
				configMap("db", map[string]string{keys.GroupLabel: "db"}), widget("w"))
			var failing atomic.Bool
			failing.Store(true)
			dyn.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
				if failing.Load() {
					return true, nil, tc.err
				}
				return false, nil, nil
			})
			tr := &Tracker{Dynamic: dyn, Discovery: newDiscovery(configMapList, widgetList),
				GroupLabels: func() []string { return []string{keys.GroupLabel} },
				informers:   map[informerKey]*tracked{}}

			refreshCtx, stop := context.WithTimeout(ctx, 10*time.Second)
			defer stop()
			if err := tr.Refresh(refreshCtx); err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			if !tr.HasSynced() {
				t.Errorf("HasSynced with widgets failing to list: false, want true")
			}
			if d := cmp.Diff([]string{"ConfigMap/db"}, memberNames(tr, "shop")); d != "" {
				t.Errorf("members (-want +got):\n%s", d)
			}
			unavailable := tr.Unavailable()
			if d := cmp.Diff([]schema.GroupVersionResource{widgets}, slices.Collect(maps.Keys(unavailable))); d != "" {
				t.Fatalf("unavailable kinds (-want +got):\n%s", d)
			}
			for _, w := range tc.want {
				if !strings.Contains(unavailable[widgets], w) {
					t.Errorf("reason %q does not say %q", unavailable[widgets], w)
				}
			}
			if d := cmp.Diff(map[schema.GroupResource]string{widgets.GroupResource(): unavailable[widgets]},
				tr.WhyUnavailable([]schema.GroupResource{widgets.GroupResource(), configMaps.GroupResource()})); d != "" {
				t.Errorf("WhyUnavailable (-want +got):\n%s", d)
			}

			// It lists again: it is available, and its objects are members.
			failing.Store(false)
			g.Eventually(tr.Unavailable).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(BeEmpty())
			g.Eventually(func() []string { return memberNames(tr, "shop") }).WithTimeout(10 * time.Second).
				Should(Equal([]string{"ConfigMap/db", "Widget/w"}))
		})
	}
}

// TestAnUnavailableKindKeepsItsObjects: a tracked kind that discovery no longer returns as
// trackable because it is unavailable (its API group's discovery failed, or the manager lost list
// and watch access to it) keeps its informers and what they hold, also through a re-list (a
// namespace opted in), and is reported unavailable until it is back. Dropping its objects let the
// teardown hold, counting fewer objects in later groups, release an earlier group's finalizer
// while their custom resources still existed. A kind that is gone (its CRD deleted) is dropped.
func TestAnUnavailableKindKeepsItsObjects(t *testing.T) {
	cases := map[string]struct {
		// change makes widgets unavailable, or gone; restore brings them back. While they are
		// unavailable their LIST fails too, as it does on an API server (forbidden, or the API
		// service down).
		change, restore func(d *changingDiscovery, canWatch *atomic.Bool)
		wantMembers     []string
		wantReason      string // "": not unavailable
	}{
		"its API group's discovery fails": {
			change:      func(d *changingDiscovery, _ *atomic.Bool) { d.set(groupDown, configMapList) },
			restore:     func(d *changingDiscovery, _ *atomic.Bool) { d.set(nil, configMapList, widgetList) },
			wantMembers: []string{"ConfigMap/db", "Widget/w"},
			wantReason:  "the API group example.com is unavailable (discovery failed: example.com/v1: the server is currently unable to handle the request): check the APIService that serves it",
		},
		"the manager lost list and watch access to it": {
			change:      func(_ *changingDiscovery, canWatch *atomic.Bool) { canWatch.Store(false) },
			restore:     func(_ *changingDiscovery, canWatch *atomic.Bool) { canWatch.Store(true) },
			wantMembers: []string{"ConfigMap/db", "Widget/w"},
			wantReason:  "wavegate may not list and watch widgets.example.com: grant list and watch on it with a ClusterRole labeled wavegate.io/aggregate-to-manager=true",
		},
		"its CRD was deleted": {
			change:      func(d *changingDiscovery, _ *atomic.Bool) { d.set(nil, configMapList) },
			wantMembers: []string{"ConfigMap/db"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{configMaps: "ConfigMapList", widgets: "WidgetList"},
				configMap("db", map[string]string{keys.GroupLabel: "db"}), widget("w"))
			disco := newDiscovery(configMapList, widgetList)
			var canWatch, listFails atomic.Bool
			canWatch.Store(true)
			dyn.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
				if listFails.Load() {
					return true, nil, apierrors.NewServiceUnavailable("widgets are unavailable")
				}
				return false, nil, nil
			})
			tr := &Tracker{Dynamic: dyn, Discovery: disco,
				GroupLabels: func() []string { return []string{keys.GroupLabel} },
				CanWatch:    func(group, _ string) bool { return group != "example.com" || canWatch.Load() },
				informers:   map[informerKey]*tracked{}}
			refresh := func(relist bool) {
				t.Helper()
				if err := tr.refresh(ctx, relist); err != nil {
					t.Fatal(err)
				}
			}
			refresh(false)
			if d := cmp.Diff([]string{"ConfigMap/db", "Widget/w"}, memberNames(tr, "shop")); d != "" {
				t.Fatalf("members before (-want +got):\n%s", d)
			}

			tc.change(disco, &canWatch)
			listFails.Store(true)
			refresh(false)
			want := map[schema.GroupVersionResource]string{}
			if tc.wantReason != "" {
				want[widgets] = tc.wantReason
			}
			check := func(when string) {
				t.Helper()
				if d := cmp.Diff(tc.wantMembers, memberNames(tr, "shop")); d != "" {
					t.Errorf("members %s (-want +got):\n%s", when, d)
				}
				if d := cmp.Diff(want, tr.Unavailable()); d != "" {
					t.Errorf("unavailable kinds %s (-want +got):\n%s", when, d)
				}
				if !tr.HasSynced() {
					t.Errorf("HasSynced %s: false, want true", when)
				}
			}
			check("once changed")
			// A namespace opts in: the informers re-list, except those of the unavailable kind, which
			// could not.
			tr.Rescope()
			refresh(true)
			check("after a re-list")

			if tc.restore == nil {
				return
			}
			tc.restore(disco, &canWatch)
			listFails.Store(false)
			refresh(false)
			if d := cmp.Diff(map[schema.GroupVersionResource]string{}, tr.Unavailable()); d != "" {
				t.Errorf("unavailable kinds once restored (-want +got):\n%s", d)
			}
			if d := cmp.Diff([]string{"ConfigMap/db", "Widget/w"}, memberNames(tr, "shop")); d != "" {
				t.Errorf("members once restored (-want +got):\n%s", d)
			}
		})
	}
}

// TestWhyUnavailableWithoutInformers: a manager that starts while an API group's discovery fails,
// or without list and watch access to a kind, knows none of their objects. A sequence whose status
// records such a kind must not be planned on the rest: WhyUnavailable names it although it is not
// tracked. A kind that is not served at all is gone, not unavailable.
func TestWhyUnavailableWithoutInformers(t *testing.T) {
	gizmos := schema.GroupResource{Group: "other.example.com", Resource: "gizmos"}
	cases := map[string]struct {
		discoveryErr error
		lists        []*metav1.APIResourceList
		canWatch     bool
		want         map[schema.GroupResource]string
	}{
		"the API group's discovery fails": {
			discoveryErr: groupDown, lists: []*metav1.APIResourceList{configMapList}, canWatch: true,
			want: map[schema.GroupResource]string{widgets.GroupResource(): "the API group example.com is unavailable (discovery failed: example.com/v1: the server is currently unable to handle the request): check the APIService that serves it"},
		},
		"the manager may not list and watch it": {
			lists: []*metav1.APIResourceList{configMapList, widgetList},
			want:  map[schema.GroupResource]string{widgets.GroupResource(): "wavegate may not list and watch widgets.example.com: grant list and watch on it with a ClusterRole labeled wavegate.io/aggregate-to-manager=true"},
		},
		"it is served and may be watched": {
			lists: []*metav1.APIResourceList{configMapList, widgetList}, canWatch: true, want: map[schema.GroupResource]string{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{configMaps: "ConfigMapList", widgets: "WidgetList"})
			disco := newDiscovery(tc.lists...)
			disco.err = tc.discoveryErr
			tr := &Tracker{Dynamic: dyn, Discovery: disco,
				GroupLabels: func() []string { return []string{keys.GroupLabel} },
				CanWatch:    func(group, _ string) bool { return group != "example.com" || tc.canWatch },
				informers:   map[informerKey]*tracked{}}
			if err := tr.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			got := tr.WhyUnavailable([]schema.GroupResource{widgets.GroupResource(), configMaps.GroupResource(), gizmos})
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("WhyUnavailable (-want +got):\n%s", d)
			}
		})
	}
}

// TestDiscoveryErrorsThatNameNoGroup: an error that does not say which groups failed leaves every
// kind as it was (no kind can be told gone); one that names them keeps the others' kinds.
func TestDiscoveryErrorsThatNameNoGroup(t *testing.T) {
	d := newDiscovery(configMapList)
	d.err = errors.New("stream error")
	if _, _, err := discover(d, true, []string{"list"}); err == nil {
		t.Errorf("discover with an error that names no group: nil error, want one")
	}
	d.err = groupDown
	kinds, failed, err := discover(d, true, []string{"list"})
	if err != nil {
		t.Fatal(err)
	}
	var got []schema.GroupVersionResource
	for _, k := range kinds {
		got = append(got, k.GVR)
	}
	if d := cmp.Diff([]schema.GroupVersionResource{configMaps}, got); d != "" {
		t.Errorf("kinds (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"example.com"}, slices.Collect(maps.Keys(failed))); d != "" {
		t.Errorf("failed groups (-want +got):\n%s", d)
	}
}

// TestAKindWhoseWatchTheReflectorRetriesIsUnavailable: some failures never reach the reflector's
// watch error handler: it retries a 429 (the watch cache of a CRD whose objects do not convert
// answers "storage is (re)initializing" for as long as that lasts) by itself. The tracker sees
// them on its own ListWatch.
func TestAKindWhoseWatchTheReflectorRetriesIsUnavailable(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList", widgets: "WidgetList"}, widget("w"))
	dyn.PrependWatchReactor("widgets", func(clienttesting.Action) (bool, watch.Interface, error) {
		return true, nil, apierrors.NewTooManyRequests("storage is (re)initializing", 1)
	})
	tr := &Tracker{Dynamic: dyn, Discovery: newDiscovery(configMapList, widgetList),
		GroupLabels: func() []string { return []string{keys.GroupLabel} },
		informers:   map[informerKey]*tracked{}}
	if err := tr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	g.Eventually(tr.Unavailable).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(
		HaveKeyWithValue(widgets, ContainSubstring("listing example.com/v1/widgets fails (storage is (re)initializing)")))
	// What it listed stays: the kind is unavailable, its objects are not gone.
	if d := cmp.Diff([]string{"Widget/w"}, memberNames(tr, "shop")); d != "" {
		t.Errorf("members (-want +got):\n%s", d)
	}
}

// TestAReadableKindIsAvailableAgain: a synced informer whose watch broke stands unavailable until
// it moves on, which a quiet kind does only at its next bookmark (a minute); a read of the kind
// that succeeds ends it sooner, and one that fails does not.
func TestAReadableKindIsAvailableAgain(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var down atomic.Bool
	var lists atomic.Int32
	down.Store(true)
	broken := apierrors.NewInternalError(errors.New("etcd leader changed"))
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList", widgets: "WidgetList"}, widget("w"))
	// The first LIST (the informer's) succeeds; then, while the kind is down, its watch and every
	// later read fail.
	dyn.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if down.Load() && lists.Add(1) > 1 {
			return true, nil, broken
		}
		return false, nil, nil
	})
	dyn.PrependWatchReactor("widgets", func(clienttesting.Action) (bool, watch.Interface, error) {
		if down.Load() {
			return true, nil, broken
		}
		return false, nil, nil
	})
	tr := &Tracker{Dynamic: dyn, Discovery: newDiscovery(configMapList, widgetList), ProbePeriod: 20 * time.Millisecond,
		GroupLabels: func() []string { return []string{keys.GroupLabel} },
		informers:   map[informerKey]*tracked{}}
	if err := tr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	g.Eventually(tr.Unavailable).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(HaveKey(widgets))
	g.Consistently(tr.Unavailable).WithTimeout(200*time.Millisecond).Should(HaveKey(widgets), "a failing read ended the error")
	before := tr.Generation()
	down.Store(false)
	g.Eventually(tr.Unavailable).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).ShouldNot(HaveKey(widgets))
	g.Expect(tr.Generation()).To(BeNumerically(">", before), "the kind came back without moving the generation")
}

// TestAKindThatNeverListsDoesNotHoldTheTracker: a LIST that neither ends nor fails (an aggregated
// API that hangs) holds the tracker only for ListStall; then its kind is unavailable, and it is
// tracked as usual once it lists.
func TestAKindThatNeverListsDoesNotHoldTheTracker(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	// The LIST of widgets hangs before it reaches the fake client (a reactor that blocks would hold
	// the fake's lock, and every other kind's LIST with it: a hung API group stalls only its kinds).
	dyn := hangingLists{Interface: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList", widgets: "WidgetList"}, widget("w")),
		gvr: widgets, release: release}
	const stall = 2 * time.Second
	tr := &Tracker{Dynamic: dyn, Discovery: newDiscovery(configMapList, widgetList), ListStall: stall,
		GroupLabels: func() []string { return []string{keys.GroupLabel} },
		informers:   map[informerKey]*tracked{}}
	if err := tr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	g.Expect(tr.HasSynced()).To(BeTrue())
	g.Expect(tr.Unavailable()).To(HaveKeyWithValue(widgets, ContainSubstring("listing example.com/v1/widgets has not completed in 2s")))
	// A namespace opting in relists the informers: the stalled one is kept, not restarted to hold
	// every sequence for another ListStall.
	start := time.Now()
	if err := tr.refresh(ctx, true); err != nil {
		t.Fatal(err)
	}
	g.Expect(time.Since(start)).To(BeNumerically("<", stall/2), "the relist waited for the stalled kind again")
	g.Expect(tr.HasSynced()).To(BeTrue())
	g.Expect(tr.Unavailable()).To(HaveKey(widgets))
	close(release)
	g.Eventually(tr.Unavailable).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(BeEmpty())
	g.Expect(memberNames(tr, "shop")).To(Equal([]string{"Widget/w"}))
}

// hangingLists is a dynamic client whose LISTs of one resource hang until release is closed.
type hangingLists struct {
	dynamic.Interface
	gvr     schema.GroupVersionResource
	release <-chan struct{}
}

// IsWatchListSemanticsUnSupported: as the fake client it wraps, it serves no streamed lists.
func (h hangingLists) IsWatchListSemanticsUnSupported() bool { return true }

func (h hangingLists) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	r := h.Interface.Resource(gvr)
	if gvr != h.gvr {
		return r
	}
	return hangingList{NamespaceableResourceInterface: r, release: h.release}
}

type hangingList struct {
	dynamic.NamespaceableResourceInterface
	release <-chan struct{}
}

func (h hangingList) List(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.NamespaceableResourceInterface.List(ctx, o)
}

// TestFreshMembersReadsEveryKindItIsNotToldToSkip: the consistent read leaves out only the kinds
// the pass found unavailable when it began; another kind whose LIST fails (it failed since) fails
// the read, which then releases nothing.
func TestFreshMembersReadsEveryKindItIsNotToldToSkip(t *testing.T) {
	md := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	md.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("conversion webhook for example.com/v1, Kind=Widget failed"))
	})
	tr := &Tracker{Metadata: md, GroupLabels: func() []string { return []string{keys.GroupLabel} },
		kinds: map[schema.GroupVersionResource]Kind{
			configMaps: {GVR: configMaps, GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespaced: true},
			widgets:    {GVR: widgets, GVK: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, Namespaced: true}}}
	if _, err := tr.FreshMembers(context.Background(), "shop", "shop", nil, IsMember); err == nil {
		t.Error("a kind that became unavailable was left out of the read")
	}
	if _, err := tr.FreshMembers(context.Background(), "shop", "shop", map[schema.GroupVersionResource]string{widgets: "down"}, IsMember); err != nil {
		t.Errorf("a kind unavailable when the pass began failed the read: %v", err)
	}
}
