package sequence

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
)

// gatedPod is a gated pod of the "shop" sequence; with a template, a ReplicaSet's pod.
func gatedPod(name, group, template string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID(name),
			Labels: map[string]string{keys.GroupLabel: group}},
		Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: keys.SchedulingGate}}},
	}
	if template != "" {
		p.Labels["pod-template-hash"] = template
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-" + template,
			UID: types.UID("rs-" + template), Controller: ptr.To(true)}}
	}
	return p
}

// TestUngateReleasesCachedPodsAndStragglers: the gated pods of an open group that the cache shows
// are released, and only those: a pod of a closed group stays gated, and so does a pod of another
// sequence in the namespace, and a pod the cache has not shown yet (it waits for a pass of its own,
// whose read is newer than the pod). Of the pods the cache shows while the pass reads, only those of
// a template the pass releases, in the same group, go too (stragglers: admission lets every later
// pod of that template start ungated); a bare pod, a new template, and the same template in another
// group's label stay gated until a read of their own.
func TestUngateReleasesCachedPodsAndStragglers(t *testing.T) {
	cached, cachedClosed := gatedPod("cached", "web", "a"), gatedPod("cached-closed", "db", "c")
	uncached := gatedPod("uncached", "web", "a")
	unread, unreadSame, unreadNew := gatedPod("unread", "web", ""), gatedPod("unread-same-template", "web", "a"), gatedPod("unread-new-template", "web", "d")
	unreadOtherGroup := gatedPod("unread-same-template-other-group", "db", "a")
	other := gatedPod("other-sequence", "web", "a")
	other.Labels[keys.SequenceLabel] = "shop.other"
	byPodSequence := func(o client.Object) []string { return []string{members.SequenceOf(o)} }
	cache := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithIndex(&corev1.Pod{}, PodSequenceIndex, byPodSequence).
		WithObjects(cached.DeepCopy(), cachedClosed.DeepCopy(), other.DeepCopy()).Build()
	// The API server: the cache's pods and one it has not shown yet ("unread..." come during the read).
	api := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(cached, cachedClosed, uncached, other).Build()
	// The reconciler's client lists from the cache and patches the API server.
	r := &Reconciler{Client: &listFrom{Client: api, lister: cache}, APIReader: api}

	ctx := context.Background()
	fresh := &freshView{r: r, seq: "shop"}
	plan := []*Group{{Name: "web", Open: true}, {Name: "db"}}
	// The consistent read: the members' plan is given; pods created meanwhile reach the cache.
	reads := 0
	gate := newOpener(openGroups(plan), func() (openness, error) {
		reads++
		for _, p := range []*corev1.Pod{unread, unreadSame, unreadNew, unreadOtherGroup} {
			if err := api.Create(ctx, p.DeepCopy()); err != nil {
				return openness{}, err
			}
			if err := cache.Create(ctx, p.DeepCopy()); err != nil {
				return openness{}, err
			}
		}
		return opens(map[string]bool{"web": true}), nil
	})
	u, err := r.ungate(ctx, cachedPods(t, r), gate, fresh)
	if err != nil {
		t.Fatal(err)
	}
	// The straggler the cache has seen by the decision goes in the pass's first round of patches.
	var first []string
	for _, p := range u.pods {
		first = append(first, p.Name)
	}
	if d := cmp.Diff([]string{"cached", "unread-same-template"}, first); d != "" {
		t.Errorf("cached pods released first (-want +got):\n%s", d)
	}
	if err := r.release(ctx, u); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range []*corev1.Pod{cached, cachedClosed, uncached, unread, unreadSame, unreadNew, unreadOtherGroup, other} {
		cur := &corev1.Pod{}
		if err := api.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
			t.Fatal(err)
		}
		got[p.Name] = HasGate(cur)
	}
	want := map[string]bool{"cached": false, "cached-closed": true, "uncached": true, "unread": true,
		"unread-same-template": false, "unread-new-template": true, "unread-same-template-other-group": true, "other-sequence": true}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("gated (-want +got):\n%s", d)
	}
	if reads != 1 {
		t.Errorf("%d consistent reads, want 1", reads)
	}
	wantReleased := map[string][]string{"web": {"rs-a/a"}}
	if d := cmp.Diff(wantReleased, u.released); d != "" {
		t.Errorf("released templates (-want +got):\n%s", d)
	}
}

// TestConsistentReadListsNoPods: the consistent read is of the members only. The pods released are
// the cache's, which existed before it began; reading them too, first (a member LIST served at a
// revision older than a pod found must not release it), held every release up by that LIST (4-45
// ms on the local cluster), and the pods it found that the cache had not shown each cost a GET
// before their patch.
func TestConsistentReadListsNoPods(t *testing.T) {
	api := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(gatedPod("web-1", "web", "a")).Build()
	reader := interceptor.NewClient(api, interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
		t.Error("the consistent read listed from the API server beyond the members")
		return nil
	}})
	read := false
	f := &freshView{r: &Reconciler{Client: api, APIReader: reader}, seq: "shop", idx: policy.Compile(nil),
		scope: newScope(api, "wavegate-system"),
		members: func(context.Context, string, string) ([]members.MetaObject, error) {
			read = true
			return nil, nil
		}}
	if _, err := f.plan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !read {
		t.Error("the consistent read did not read the members")
	}
}

// TestOpener: a group opens only when the cache and a consistent read made by the same reconcile
// both say so; the read is made once, and not at all for a group the cache calls closed.
func TestOpener(t *testing.T) {
	type step struct {
		group string
		want  bool
	}
	cases := []struct {
		name      string
		cached    map[string]bool
		freshOpen map[string]bool
		steps     []step
		reads     int
	}{
		{name: "closed on the cache: no read",
			cached: map[string]bool{"web": false}, freshOpen: map[string]bool{"web": true},
			steps: []step{{"web", false}}},
		{name: "open on the cache and on the read, once for every group",
			cached: map[string]bool{"web": true, "db": true}, freshOpen: map[string]bool{"web": true, "db": true},
			steps: []step{{"web", true}, {"db", true}, {"web", true}}, reads: 1},
		{name: "open on a lagging cache, closed on the read",
			cached: map[string]bool{"web": true}, freshOpen: map[string]bool{"web": false},
			steps: []step{{"web", false}, {"web", false}}, reads: 1},
		{name: "a group the read does not know is closed",
			cached: map[string]bool{"web": true}, freshOpen: map[string]bool{},
			steps: []step{{"web", false}}, reads: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var plan []*Group
			for g, open := range c.cached {
				plan = append(plan, &Group{Name: g, Open: open})
			}
			reads := 0
			o := newOpener(openGroups(plan), func() (openness, error) { reads++; return opens(c.freshOpen), nil })
			for _, s := range c.steps {
				got, err := o.Open(s.group)
				if err != nil {
					t.Fatal(err)
				}
				if got != s.want {
					t.Errorf("Open(%q) = %v, want %v", s.group, got, s.want)
				}
			}
			if reads != c.reads {
				t.Errorf("%d consistent reads, want %d", reads, c.reads)
			}
		})
	}
}

// opens is a consistent read that opens exactly these groups, and no group outside them.
func opens(groups map[string]bool) openness { return openness{groups: groups} }

// listFrom lists from a lagging cache and does everything else on the API server.
// cachedPods are the pods of the "shop" sequence that a reconcile lists from its cache.
func cachedPods(t *testing.T, r *Reconciler) []*corev1.Pod {
	t.Helper()
	pods, err := r.sequencePods(context.Background(), "shop", (&freshView{seq: "shop"}).joins(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

type listFrom struct {
	client.Client
	lister client.Reader
}

func (l *listFrom) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return l.lister.List(ctx, list, opts...)
}

// TestReleasedPodsAreNotPatchedTwice: a reconcile that starts before the cache has seen the last
// one's gate removals (the cache still shows the pods gated) counts them as released and sends no
// second patch.
func TestReleasedPodsAreNotPatchedTwice(t *testing.T) {
	p := gatedPod("web-1", "web", "a")
	byPodSequence := func(o client.Object) []string { return []string{members.SequenceOf(o)} }
	stale := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithIndex(&corev1.Pod{}, PodSequenceIndex, byPodSequence).
		WithObjects(p.DeepCopy()).Build()
	patches := 0
	api := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(p.DeepCopy()).Build(), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, pt client.Patch, opts ...client.PatchOption) error {
			patches++
			return c.Patch(ctx, o, pt, opts...)
		}})
	r := &Reconciler{Client: &listFrom{Client: api, lister: stale}, APIReader: api}
	ctx := context.Background()
	reads := 0
	for pass := range 2 {
		gate := newOpener(openGroups([]*Group{{Name: "web", Open: true}}), func() (openness, error) {
			reads++
			return opens(map[string]bool{"web": true}), nil
		})
		u, err := r.ungate(ctx, cachedPods(t, r), gate, &freshView{r: r, seq: "shop"})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.release(ctx, u); err != nil {
			t.Fatal(err)
		}
		if patches != 1 {
			t.Errorf("after pass %d: %d patches, want 1", pass+1, patches)
		}
	}
	if reads != 1 {
		t.Errorf("%d consistent reads, want 1: the second pass has nothing to decide", reads)
	}
}

// TestReleaseTakesStragglersSeenMeanwhile: a pod of a template the pass releases that the cache
// sees only while the gates are being removed (a ReplicaSet still creating its pods) is released
// by the same pass, once the others are; one the cache has not seen yet is left to the next pass,
// which sees it.
func TestReleaseTakesStragglersSeenMeanwhile(t *testing.T) {
	first, meanwhile, unseen := gatedPod("web-1", "web", "a"), gatedPod("web-2", "web", "a"), gatedPod("web-3", "web", "a")
	byPodSequence := func(o client.Object) []string { return []string{members.SequenceOf(o)} }
	cache := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithIndex(&corev1.Pod{}, PodSequenceIndex, byPodSequence).
		WithObjects(first.DeepCopy()).Build()
	store := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(first.DeepCopy()).Build()
	ctx := context.Background()
	var created atomic.Bool
	api := interceptor.NewClient(store, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, pt client.Patch, opts ...client.PatchOption) error {
			if o.GetName() == first.Name && !created.Swap(true) {
				// The ReplicaSet creates two more pods while the first one's gate is removed; the
				// cache sees one of them before the patch returns.
				for _, p := range []*corev1.Pod{meanwhile, unseen} {
					if err := c.Create(ctx, p.DeepCopy()); err != nil {
						return err
					}
				}
				if err := cache.Create(ctx, meanwhile.DeepCopy()); err != nil {
					return err
				}
			}
			return c.Patch(ctx, o, pt, opts...)
		}})
	r := &Reconciler{Client: &listFrom{Client: api, lister: cache}, APIReader: api}
	gated := func() map[string]bool {
		got := map[string]bool{}
		for _, p := range []*corev1.Pod{first, meanwhile, unseen} {
			cur := &corev1.Pod{}
			if err := store.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
				t.Fatal(err)
			}
			got[p.Name] = HasGate(cur)
		}
		return got
	}
	u, err := r.ungate(ctx, cachedPods(t, r), newOpener(openGroups([]*Group{{Name: "web", Open: true}}), func() (openness, error) {
		return opens(map[string]bool{"web": true}), nil
	}), &freshView{r: r, seq: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.release(ctx, u); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]bool{"web-1": false, "web-2": false, "web-3": true}, gated()); d != "" {
		t.Errorf("gated after the pass (-want +got):\n%s", d)
	}
}

// TestPodsOfOtherNamespacesAreNotTheSequences: any pod may name any sequence in its labels (pods
// are never denied at admission), but only the pods of namespaces that may join a sequence are its
// pods. A tenant's pod naming the shop sequence neither clears a template for it (its running pod)
// nor counts as gated there, and the sequence's pass spends nothing on one that gated itself with
// wavegate's gate: StrangerReconciler releases it, apart.
func TestPodsOfOtherNamespacesAreNotTheSequences(t *testing.T) {
	ctx := context.Background()
	own := gatedPod("web-1", "web", "a")
	running := gatedPod("intruder-1", "web", "next")
	running.Namespace, running.Labels[keys.SequenceLabel] = "tenant", "shop"
	running.Spec.SchedulingGates = nil
	selfGated := gatedPod("intruder-2", "web", "b")
	selfGated.Namespace, selfGated.Labels[keys.SequenceLabel] = "tenant", "shop"
	namespaces := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{keys.EnabledLabel: "true"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Labels: map[string]string{keys.EnabledLabel: "true"}}},
	}
	byPodSequence := func(o client.Object) []string { return []string{members.SequenceOf(o)} }
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithIndex(&corev1.Pod{}, PodSequenceIndex, byPodSequence).
		WithObjects(append(namespaces, own, running, selfGated)...).Build()
	r := &Reconciler{Client: c}
	sc := newScope(c, "wavegate-system")
	fresh := &freshView{r: r, seq: "shop", idx: policy.Compile(nil), scope: sc}

	pods, err := r.sequencePods(ctx, "shop", fresh.joins(ctx))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if diff := cmp.Diff([]string{"shop/web-1"}, names); diff != "" {
		t.Errorf("the sequence's pods (-want +got):\n%s", diff)
	}
	u, err := r.ungate(ctx, pods, newOpener(openGroups([]*Group{{Name: "web", Open: false}}), func() (openness, error) {
		return opens(map[string]bool{}), nil
	}), fresh)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{}, u.running); diff != "" {
		t.Errorf("templates running in the sequence (-want +got):\n%s", diff)
	}
	if err := r.releaseOutside(ctx, pods, nil, sc); err != nil {
		t.Fatal(err)
	}
	gated := func() map[string]bool {
		out := map[string]bool{}
		for _, p := range []*corev1.Pod{own, selfGated} {
			got := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
				t.Fatal(err)
			}
			out[p.Name] = HasGate(got)
		}
		return out
	}
	if diff := cmp.Diff(map[string]bool{"web-1": true, "intruder-2": true}, gated()); diff != "" {
		t.Errorf("gated after the sequence's pass (-want +got):\n%s", diff)
	}
	for _, p := range []*corev1.Pod{own, selfGated} {
		if _, err := (&StrangerReconciler{Client: c, Policies: fixedPolicies{policy.Compile(nil)}}).Reconcile(ctx,
			ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(map[string]bool{"web-1": true, "intruder-2": false}, gated()); diff != "" {
		t.Errorf("gated after the stranger pods' reconcile (-want +got):\n%s", diff)
	}
}

// TestStrangerPodsAreReleasedApart: StrangerReconciler removes wavegate's gate from a pod that
// names a sequence its namespace may not join (and says so in an Event on the pod), and from no
// other: a pod of its namespace's own sequences, or of a shared sequence that the namespace's
// labels let it join, is its sequence's. Released only when the API server's labels agree; one the
// cache still shows selected waits for the cache's label change, which brings it back.
func TestStrangerPodsAreReleasedApart(t *testing.T) {
	ctx := context.Background()
	platform := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "platform"}, Spec: wavev1.WavePolicySpec{
		Sequences: []wavev1.SharedSequence{{Name: "platform", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}}}
	shared := policy.Compile([]wavev1.WavePolicy{*platform})
	team := map[string]string{"team": "a"}
	cases := map[string]struct {
		sequence     *string // the pod's sequence label (nil: none)
		cached, live map[string]string
		deleting     bool
		released     bool
	}{
		"another namespace's sequence":                        {sequence: ptr.To("shop"), released: true},
		"another namespace's named sequence":                  {sequence: ptr.To("shop.web"), released: true},
		"an empty sequence":                                   {sequence: ptr.To(""), released: true},
		"its namespace's sequence":                            {},
		"its namespace's named sequence":                      {sequence: ptr.To("tenant.web")},
		"a shared sequence that selects it":                   {sequence: ptr.To("platform"), cached: team, live: team},
		"a shared sequence that selected it (cache lags)":     {sequence: ptr.To("platform"), cached: team}, // until the cache's label change
		"a shared sequence that selects it (cache lags)":      {sequence: ptr.To("platform"), live: team},
		"a shared sequence that does not select it":           {sequence: ptr.To("platform"), released: true},
		"another namespace's sequence, the pod being deleted": {sequence: ptr.To("shop"), deleting: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := gatedPod("intruder", "web", "")
			pod.Namespace = "tenant"
			if tc.sequence != nil {
				pod.Labels[keys.SequenceLabel] = *tc.sequence
			}
			if tc.deleting {
				pod.DeletionTimestamp, pod.Finalizers = ptr.To(metav1.Now()), []string{"example.com/keep"}
			}
			ns := func(l map[string]string) *corev1.Namespace {
				return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Labels: l}}
			}
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(pod, ns(tc.cached)).Build()
			live := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(ns(tc.live), platform.DeepCopy()).Build()
			rec := events.NewFakeRecorder(10)
			r := &StrangerReconciler{Client: c, APIReader: live, Policies: fixedPolicies{shared}, Recorder: rec, Namespace: "wavegate-system"}
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pod)}); err != nil {
				t.Fatal(err)
			}
			got := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				t.Fatal(err)
			}
			if HasGate(got) == tc.released {
				t.Errorf("gated = %v, want %v", HasGate(got), !tc.released)
			}
			var evs []string
			for len(rec.Events) > 0 {
				evs = append(evs, <-rec.Events)
			}
			if tc.released != (len(evs) == 1) || tc.released && !strings.Contains(evs[0], ReasonOutsideSequence+" namespace tenant may not join sequence") {
				t.Errorf("Events %q, want one %s when released", evs, ReasonOutsideSequence)
			}
		})
	}
	t.Run("the pod was created a moment ago", func(t *testing.T) {
		pod := gatedPod("intruder", "web", "")
		pod.Namespace, pod.Labels[keys.SequenceLabel] = "tenant", "shop"
		created := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
		pod.CreationTimestamp = metav1.NewTime(created)
		c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(pod).Build()
		now := created.Add(time.Second)
		r := &StrangerReconciler{Client: c, Policies: fixedPolicies{shared}, Now: func() time.Time { return now }}
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pod)})
		got := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			t.Fatal(err)
		}
		if err != nil || res.RequeueAfter != strangerGrace-time.Second || !HasGate(got) {
			t.Errorf("Reconcile = %+v, %v, gated %v; want a requeue after %s and the pod still gated (another replica may have gated it on a policy not loaded here yet)",
				res, err, HasGate(got), strangerGrace-time.Second)
		}
		now = created.Add(strangerGrace)
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pod)}); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			t.Fatal(err)
		}
		if HasGate(got) {
			t.Error("still gated once the grace is over")
		}
	})
	t.Run("a young pod of a sequence the API server's policies share with its namespace", func(t *testing.T) {
		// The cache has no policy yet; another replica admitted the pod by the one it had loaded.
		pod := gatedPod("member", "web", "")
		pod.Namespace, pod.Labels[keys.SequenceLabel] = "tenant", "platform"
		created := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
		pod.CreationTimestamp = metav1.NewTime(created)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Labels: team}}
		c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(pod, ns).Build()
		live := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(ns.DeepCopy(), &wavev1.WavePolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "platform"}, Spec: wavev1.WavePolicySpec{Sequences: []wavev1.SharedSequence{{
				Name: "platform", NamespaceSelector: &metav1.LabelSelector{MatchLabels: team}}}}}).Build()
		now := created.Add(10 * time.Second)
		r := &StrangerReconciler{Client: c, APIReader: live, Policies: fixedPolicies{policy.Compile(nil)}, Now: func() time.Time { return now }}
		gatedAfter := func() bool {
			t.Helper()
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pod)}); err != nil {
				t.Fatal(err)
			}
			got := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				t.Fatal(err)
			}
			return HasGate(got)
		}
		if !gatedAfter() {
			t.Fatal("released on the cache's policies while the API server's share the sequence with the namespace")
		}
		now = created.Add(time.Hour)
		if !gatedAfter() {
			t.Error("released on the cache's policies an hour later while the API server's still share the sequence with the namespace")
		}
	})
	t.Run("the pod is gone", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
		r := &StrangerReconciler{Client: c, Policies: fixedPolicies{shared}}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "tenant", Name: "intruder"}}); err != nil {
			t.Errorf("Reconcile = %v, want nil", err)
		}
	})
	t.Run("the policies are not loaded yet", func(t *testing.T) {
		pod := gatedPod("intruder", "web", "")
		pod.Namespace, pod.Labels[keys.SequenceLabel] = "tenant", "shop"
		c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(pod).Build()
		r := &StrangerReconciler{Client: c, Policies: fixedPolicies{nil}}
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pod)})
		got := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			t.Fatal(err)
		}
		if err != nil || res.RequeueAfter == 0 || !HasGate(got) {
			t.Errorf("Reconcile = %+v, %v, gated %v; want a requeue and the pod still gated", res, err, HasGate(got))
		}
	})
}

// TestPodsWakeOnlyTheirSequences: a pod's events wake the pass of the sequence it names only when
// its namespace may join it; a tenant's pods that name another namespace's sequence, or a shared
// sequence that does not select it, keep it no busier.
func TestPodsWakeOnlyTheirSequences(t *testing.T) {
	shared := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "platform"}, Spec: wavev1.WavePolicySpec{
		Sequences: []wavev1.SharedSequence{{Name: "platform", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}}}})
	pod := func(sequence string) *corev1.Pod {
		p := gatedPod("p", "web", "")
		p.Namespace = "tenant"
		if sequence != "" {
			p.Labels[keys.SequenceLabel] = sequence
		}
		return p
	}
	team := map[string]string{"team": "a"}
	cases := []struct {
		idx      *policy.Index
		pod      *corev1.Pod
		labels   map[string]string
		wakes    bool
		sequence string
	}{
		{idx: shared, pod: pod(""), wakes: true, sequence: "tenant"},
		{idx: shared, pod: pod("tenant.web"), wakes: true, sequence: "tenant.web"},
		{idx: shared, pod: pod("platform"), labels: team, wakes: true, sequence: "platform"},
		{idx: shared, pod: pod("platform"), sequence: "platform"},
		{idx: shared, pod: pod("shop"), labels: team, sequence: "shop"},
		{idx: shared, pod: pod("shop.web"), sequence: "shop.web"},
		{idx: nil, pod: pod("shop"), wakes: true, sequence: "shop"},
	}
	for _, tc := range cases {
		seq, wakes := podSequence(tc.idx, tc.pod, tc.labels)
		if seq != tc.sequence || wakes != tc.wakes {
			t.Errorf("podSequence(%s, %v) = %q, %v; want %q, %v", tc.pod.Labels[keys.SequenceLabel], tc.labels, seq, wakes, tc.sequence, tc.wakes)
		}
	}
}

// TestGatedPodsWakeTheSequencesTheyName: a namespace's label change or a policy change wakes the
// sequences its gated pods name, once each (a pod whose event podSequence dropped on stale labels
// or policies may be that sequence's now); pods without the gate wake none.
func TestGatedPodsWakeTheSequencesTheyName(t *testing.T) {
	pod := func(ns, name, seq string, gated bool) client.Object {
		p := gatedPod(name, "web", "")
		p.Namespace, p.Labels[keys.SequenceLabel] = ns, seq
		if !gated {
			p.Spec.SchedulingGates = nil
		}
		return p
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		pod("a", "1", "platform", true), pod("a", "2", "platform", true), pod("a", "3", "a", true),
		pod("a", "4", "other", false), pod("b", "5", "b.web", true)).Build()
	names := func(reqs []reconcile.Request) []string {
		var out []string
		for _, r := range reqs {
			out = append(out, r.Name)
		}
		slices.Sort(out)
		return out
	}
	ctx := context.Background()
	if diff := cmp.Diff([]string{"a", "b.web", "platform"}, names(gatedPodsSequences(ctx, c))); diff != "" {
		t.Errorf("every namespace (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a", "platform"}, names(gatedPodsSequences(ctx, c, client.InNamespace("a")))); diff != "" {
		t.Errorf("namespace a (-want +got):\n%s", diff)
	}
}

// TestLaggingNamespaceCacheReleasesNothing: the manager's namespace cache can lag its pod cache
// (the namespace created, or labeled wavegate.io/enabled, by the same apply as the pods, which the
// API server gated on the live labels). A pod is released as outside wavegate's scope only when
// the API server agrees; before, a pass that saw the pod first removed its gate at once.
func TestLaggingNamespaceCacheReleasesNothing(t *testing.T) {
	ctx := context.Background()
	enabled := map[string]string{keys.EnabledLabel: "true"}
	cases := map[string]struct {
		cached, live *corev1.Namespace // nil: not there
		released     bool
	}{
		"created a moment ago: not cached yet": {
			live: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: enabled}}},
		"opted in a moment ago: the cache has the old labels": {
			cached: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
			live:   &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: enabled}}},
		"opted out": {
			cached:   &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
			live:     &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
			released: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := gatedPod("web-1", "web", "a")
			cacheObjs, liveObjs := []client.Object{pod}, []client.Object{}
			if tc.cached != nil {
				cacheObjs = append(cacheObjs, tc.cached)
			}
			if tc.live != nil {
				liveObjs = append(liveObjs, tc.live)
			}
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(cacheObjs...).Build()
			live := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(liveObjs...).Build()
			r := &Reconciler{Client: c, APIReader: live}
			sc := newScope(c, "wavegate-system").withLive(live)
			if err := r.releaseOutside(ctx, []*corev1.Pod{pod}, nil, sc); err != nil {
				t.Fatal(err)
			}
			got := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				t.Fatal(err)
			}
			if HasGate(got) == tc.released {
				t.Errorf("gated = %v, want %v", HasGate(got), !tc.released)
			}
		})
	}
}

// TestTemplateToken: a pod's template is read from the label its controller stamps. A template
// that also carries the other label (a pod-template-hash copied into a StatefulSet's template)
// has a value that never changes: read first, it made every revision of the StatefulSet look like
// the one already released, and its upgraded pods were admitted ungated.
func TestTemplateToken(t *testing.T) {
	both := map[string]string{keys.PodTemplateHashLabel: "static", keys.ControllerRevisionHashLabel: "rev-2"}
	pod := func(kind string, labels map[string]string) *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Labels: labels, OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: "x", UID: "owner", Controller: ptr.To(true)}}}
	}
	cases := map[string]struct {
		pod  metav1.Object
		want string
	}{
		"a ReplicaSet's pod":                  {pod("ReplicaSet", both), "owner/static"},
		"a StatefulSet's pod":                 {pod("StatefulSet", both), "owner/rev-2"},
		"a DaemonSet's pod":                   {pod("DaemonSet", both), "owner/rev-2"},
		"an operator's pod":                   {pod("Widget", both), "owner/static"},
		"an operator's pod with no hash":      {pod("Widget", nil), "owner"},
		"a StatefulSet's pod with only a pth": {pod("StatefulSet", map[string]string{keys.PodTemplateHashLabel: "static"}), "owner"},
		"a bare pod":                          {&metav1.ObjectMeta{Labels: both}, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := TemplateToken(tc.pod); got != tc.want {
				t.Errorf("TemplateToken = %q, want %q", got, tc.want)
			}
		})
	}
}
