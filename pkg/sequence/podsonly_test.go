package sequence

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/metrics"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/teardown"
)

// Pods are never members: a bare pod (`kubectl run migrate -l wavegate.io/group=migrate,...`) or
// the pod of a controller wavegate does not track is gated at admission, but no tracked member
// puts its group in the plan. Such a group opens as an empty group at the pods' order would: once
// every group of the plan before it is released, decided like any group on the cache and then on
// the consistent read.

// planOf plans the shop sequence with the wait Jobs of the released groups complete.
func planOf(ms []Member, released ...string) []*Group {
	return Plan("shop", ms, nil, func(g *Group) JobState {
		name := g.JobName
		for _, mem := range ms {
			if slices.Contains(released, mem.Resolution.Group) && name == JobName("shop", mem.Resolution.Group, revision([]Member{mem})) {
				return JobComplete
			}
		}
		return JobMissing
	}, "wavegate-system")
}

// TestOpenerPodsOfGroupsWithoutMembers: the opener's decision for the pods of a group a plan does
// not have, on the cache and on the consistent read.
func TestOpenerPodsOfGroupsWithoutMembers(t *testing.T) {
	db, web, mig := m("database", 1, "shop", "db", 1), m("web", 3, "shop", "web", 1), m("migrate", 2, "shop", "migrate", 1)
	cases := []struct {
		name string
		// cached and fresh are the plans on the cache and on the consistent read; settling closes
		// the cache's (the members have not settled).
		cached, fresh []*Group
		settling      bool
		group         string
		pos           podGroup
		want          bool
		reads         int
		// asked is how often the pods' position is asked: for a group a plan does not have, and for
		// one it opens (the groups the pods' own policy requires), never for one it keeps closed.
		asked int
	}{
		{name: "an earlier group is not released: gated without a read",
			cached: planOf([]Member{db, web}), fresh: planOf([]Member{db, web}),
			group: "migrate", pos: podGroup{order: 2}, want: false, asked: 1},
		{name: "every earlier group is released: released, and a later group does not hold it",
			cached: planOf([]Member{db, web}, "database"), fresh: planOf([]Member{db, web}, "database"),
			group: "migrate", pos: podGroup{order: 2}, want: true, reads: 1, asked: 2},
		{name: "a lagging cache: the read has an earlier group that is not released",
			cached: planOf(nil), fresh: planOf([]Member{db}),
			group: "migrate", pos: podGroup{order: 2}, want: false, reads: 1, asked: 2},
		{name: "a lagging cache: the read has the earlier group at a new revision",
			cached: planOf([]Member{db}, "database"), fresh: planOf([]Member{m("database", 1, "shop", "db", 2)}),
			group: "migrate", pos: podGroup{order: 2}, want: false, reads: 1, asked: 2},
		{name: "before the first group that is not released",
			cached: planOf([]Member{db, web}), fresh: planOf([]Member{db, web}),
			group: "setup", pos: podGroup{order: 0}, want: true, reads: 1, asked: 2},
		{name: "at the same order, a group that sorts before it by name",
			cached: planOf([]Member{db}), fresh: planOf([]Member{db}),
			group: "cache", pos: podGroup{order: 1}, want: true, reads: 1, asked: 2},
		{name: "at the same order, a group that sorts after it by name",
			cached: planOf([]Member{db}), fresh: planOf([]Member{db}),
			group: "migrate", pos: podGroup{order: 1}, want: false, asked: 1},
		{name: "no member at all: nothing to wait for",
			cached: planOf(nil), fresh: planOf(nil),
			group: "migrate", pos: podGroup{order: 2}, want: true, reads: 1, asked: 2},
		{name: "members not settled: nothing opens",
			cached: planOf(nil), fresh: planOf(nil), settling: true,
			group: "migrate", pos: podGroup{order: 2}, want: false},
		{name: "members not settled: nothing opens, before the first group either",
			cached: planOf([]Member{db}), fresh: planOf([]Member{db}), settling: true,
			group: "setup", pos: podGroup{order: 0}, want: false},
		{name: "a group its policy requires before it has no members",
			cached: planOf([]Member{web}), fresh: planOf([]Member{web}),
			group: "migrate", pos: podGroup{order: 2, requires: []string{"database"}}, want: false, asked: 1},
		{name: "a group its policy requires before it is released",
			cached: planOf([]Member{db, web}, "database"), fresh: planOf([]Member{db, web}, "database"),
			group: "migrate", pos: podGroup{order: 2, requires: []string{"database"}}, want: true, reads: 1, asked: 2},
		{name: "the read finds the group's last member gone: its pods go as a group without members",
			cached: planOf([]Member{db, mig}, "database"), fresh: planOf([]Member{db}, "database"),
			group: "migrate", pos: podGroup{order: 2}, want: true, reads: 1, asked: 2},
		{name: "a group both plans have closed: as the plans say, its pods' position not asked",
			cached: planOf([]Member{db, mig}), fresh: planOf([]Member{db, mig}),
			group: "migrate", pos: podGroup{order: 2}, want: false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cached := openGroups(c.cached)
			if c.settling {
				cached = cached.closed()
			}
			reads, asked := 0, 0
			o := newOpener(cached, func() (openness, error) { reads++; return openGroups(c.fresh), nil })
			got, err := o.OpenPods(c.group, func() podGroup { asked++; return c.pos })
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(struct{ Open, Read, Asked int }{b2i(c.want), c.reads, c.asked},
				struct{ Open, Read, Asked int }{b2i(got), reads, asked}); d != "" {
				t.Errorf("OpenPods(%q) (-want +got):\n%s", c.group, d)
			}
			// A wait Job's group must be the plans' own: never opened as one without members.
			if open, err := o.Open(c.group); err != nil || open && !o.Planned(c.group) {
				t.Errorf("Open(%q) = %v, %v: a group the cache does not plan opened for its wait Job", c.group, open, err)
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestPodGroup: where a pod's group stands comes from its labels as any object's resolution, the
// policy's required groups before it included; from the order admission stamped when its labels
// no longer resolve; after every group when neither says.
func TestPodGroup(t *testing.T) {
	idx := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: wavev1.WavePolicySpec{
		GroupLabel: "app.kubernetes.io/component",
		Groups: []wavev1.GroupSpec{{Name: "database", Order: 1, Required: true}, {Name: "migrate", Order: 2},
			{Name: "web", Order: 3}}}}})
	pod := func(labels, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", UID: "p", Labels: labels, Annotations: annotations}}
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want podGroup
	}{
		{name: "the group-order label", pod: pod(map[string]string{keys.GroupLabel: "setup", keys.GroupOrderLabel: "7"}, nil),
			want: podGroup{order: 7}},
		{name: "a policy's group, with the groups it requires before it",
			pod:  pod(map[string]string{"app.kubernetes.io/component": "migrate", keys.GroupLabel: "migrate"}, nil),
			want: podGroup{order: 2, requires: []string{"database"}}},
		{name: "labels that no longer resolve: the order admission stamped",
			pod:  pod(map[string]string{keys.GroupLabel: "setup"}, map[string]string{keys.ResolvedGroupOrderAnnotation: "5"}),
			want: podGroup{order: 5}},
		{name: "neither: after every group", pod: pod(map[string]string{keys.GroupLabel: "setup"}, nil),
			want: podGroup{order: math.MaxInt32}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &freshView{seq: "shop", idx: idx}
			if d := cmp.Diff(c.want, f.podGroup(context.Background(), c.pod), cmp.AllowUnexported(podGroup{})); d != "" {
				t.Errorf("podGroup (-want +got):\n%s", d)
			}
		})
	}
}

// TestUngatePodsOfGroupsWithoutMembers: a pass releases the gated pods of a group without members
// once every group before their order is released, counts those it keeps under their group, and
// reports where that group stands.
func TestUngatePodsOfGroupsWithoutMembers(t *testing.T) {
	bare := func(name, group, order string) *corev1.Pod {
		p := gatedPod(name, group, "")
		if order != "" {
			p.Labels[keys.GroupOrderLabel] = order
		}
		return p
	}
	pods := []*corev1.Pod{
		bare("migrate", "migrate", "2"),
		bare("setup", "setup", "0"),
		// Its labels give no order (a policy that ordered its group went): admission's stamp does.
		func() *corev1.Pod {
			p := bare("late", "late", "")
			p.Annotations = map[string]string{keys.ResolvedGroupOrderAnnotation: "5"}
			return p
		}(),
		gatedPod("web-1", "web", "a"),
	}
	db, web := m("database", 1, "shop", "db", 1), m("web", 3, "shop", "web", 1)
	cases := []struct {
		name         string
		plan         []*Group
		wantReleased []string
		wantGated    map[string]int32
		wantPodsOnly map[string]podGroup
	}{
		{name: "the database is not released", plan: planOf([]Member{db, web}),
			wantReleased: []string{"setup"},
			wantGated:    map[string]int32{"migrate": 1, "late": 1, "web": 1},
			wantPodsOnly: map[string]podGroup{"migrate": {order: 2}, "late": {order: 5}}},
		{name: "the database is released; the web does not wait for the migration", plan: planOf([]Member{db, web}, "database"),
			wantReleased: []string{"migrate", "setup", "web-1"},
			wantGated:    map[string]int32{"late": 1},
			wantPodsOnly: map[string]podGroup{"late": {order: 5}}},
		{name: "every group is released", plan: planOf([]Member{db, web}, "database", "web"),
			wantReleased: []string{"late", "migrate", "setup", "web-1"},
			wantGated:    map[string]int32{},
			wantPodsOnly: map[string]podGroup{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := make([]client.Object, len(pods))
			for i, p := range pods {
				objs[i] = p.DeepCopy()
			}
			cl := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
				WithIndex(&corev1.Pod{}, PodSequenceIndex, func(o client.Object) []string { return []string{members.SequenceOf(o)} }).
				WithObjects(objs...).Build()
			r := &Reconciler{Client: cl, APIReader: cl}
			ctx := context.Background()
			fresh := &freshView{r: r, seq: "shop", idx: policy.Compile(nil), scope: newScope(cl, "wavegate-system")}
			u, err := r.ungate(ctx, cachedPods(t, r), newOpener(openGroups(c.plan), func() (openness, error) { return openGroups(c.plan), nil }), fresh)
			if err != nil {
				t.Fatal(err)
			}
			var released []string
			for _, p := range u.pods {
				released = append(released, p.Name)
			}
			slices.Sort(released)
			if d := cmp.Diff(c.wantReleased, released); d != "" {
				t.Errorf("released (-want +got):\n%s", d)
			}
			if d := cmp.Diff(c.wantGated, u.gated); d != "" {
				t.Errorf("gated (-want +got):\n%s", d)
			}
			if d := cmp.Diff(c.wantPodsOnly, u.podsOnly, cmp.AllowUnexported(podGroup{})); d != "" {
				t.Errorf("groups without members (-want +got):\n%s", d)
			}
		})
	}
}

// TestWriteStatusReportsPodsOfGroupsWithoutMembers: the gated pods of a group without members are
// counted in the status under their group, at their order, with what they wait for; the group is
// not released while they wait, and leaves the status (and the gated-pods metric) once they go.
func TestWriteStatusReportsPodsOfGroupsWithoutMembers(t *testing.T) {
	s := testScheme(t)
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&wavev1.Sequence{}).Build()
	r := &Reconciler{Client: c}
	ctx := context.Background()
	const seq = "pods-only"
	db := m("database", 1, seq, "db", 1)
	type group struct {
		Name               string
		Order              int32
		Phase              wavev1.GroupPhase
		Members, GatedPods int32
		Message            string
	}
	steps := []struct {
		name       string
		released   []string
		u          *ungated
		wantGroups []group
		wantReady  metav1.ConditionStatus
		wantSeries int
	}{
		{name: "the migration waits for the database",
			u: &ungated{gated: map[string]int32{"migrate": 2}, podsOnly: map[string]podGroup{"migrate": {order: 2}}},
			wantGroups: []group{
				{"database", 1, wavev1.GroupWaiting, 1, 0, "waiting for its members to be ready"},
				{"migrate", 2, wavev1.GroupPending, 0, 2, "no tracked member (pods are not members); its pods wait for group database"}},
			wantReady: metav1.ConditionFalse, wantSeries: 2},
		{name: "the database is released, the migration's pods are not yet",
			released: []string{"database"},
			u:        &ungated{gated: map[string]int32{"migrate": 2}, podsOnly: map[string]podGroup{"migrate": {order: 2}}},
			wantGroups: []group{
				{"database", 1, wavev1.GroupReleased, 1, 0, "ready"},
				{"migrate", 2, wavev1.GroupPending, 0, 2, "no tracked member (pods are not members); its pods wait for the members to settle"}},
			wantReady: metav1.ConditionFalse, wantSeries: 2},
		{name: "the migration's pods are released", released: []string{"database"}, u: &ungated{},
			wantGroups: []group{{"database", 1, wavev1.GroupReleased, 1, 0, "ready"}},
			wantReady:  metav1.ConditionTrue, wantSeries: 1},
	}
	for _, st := range steps {
		prev := &wavev1.Sequence{}
		if err := c.Get(ctx, client.ObjectKey{Name: ObjectName(seq)}, prev); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		plan := Plan(seq, []Member{db}, nil, func(g *Group) JobState {
			name := g.JobName
			if slices.Contains(st.released, "database") && name == JobName(seq, "database", revision([]Member{db})) {
				return JobComplete
			}
			return JobMissing
		}, "wavegate-system")
		if _, err := r.writeStatus(ctx, seq, plan, nil, st.u, &teardown.Result{}, nil, hold{}, prev); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		cur := &wavev1.Sequence{}
		if err := c.Get(ctx, client.ObjectKey{Name: ObjectName(seq)}, cur); err != nil {
			t.Fatal(err)
		}
		var got []group
		for _, g := range cur.Status.Groups {
			got = append(got, group{g.Name, g.Order, wavev1.GroupPhase(g.Phase), g.Members, g.GatedPods, g.Message})
		}
		if d := cmp.Diff(st.wantGroups, got); d != "" {
			t.Errorf("%s: groups (-want +got):\n%s", st.name, d)
		}
		if cond := meta.FindStatusCondition(cur.Status.Conditions, "Ready"); cond == nil || cond.Status != st.wantReady {
			t.Errorf("%s: Ready condition %+v, want %s", st.name, cond, st.wantReady)
		}
		if n := seriesOf(t, metrics.GatedPods, seq); n != st.wantSeries {
			t.Errorf("%s: %d gated-pod series, want %d", st.name, n, st.wantSeries)
		}
	}
	metrics.Forget(seq)
}

// seriesOf counts a metric's series of a sequence.
func seriesOf(t *testing.T, c prometheus.Collector, seq string) int {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	n := 0
	for m := range ch {
		var out dto.Metric
		if err := m.Write(&out); err != nil {
			t.Fatal(err)
		}
		for _, l := range out.GetLabel() {
			if l.GetName() == "sequence" && l.GetValue() == seq {
				n++
			}
		}
	}
	return n
}

// TestPodsOnlyMessageNamesTheGroupRightBefore: the pods of a group without members say they wait
// for what a planned group at their place would (Plan): the latest group before them that is not
// released, not the first one of the sequence.
func TestPodsOnlyMessageNamesTheGroupRightBefore(t *testing.T) {
	members := []Member{m("database", 1, "shop", "db", 1), m("migrate", 2, "shop", "migrate", 1)}
	plan := Plan("shop", members, nil, func(*Group) JobState { return JobMissing }, "wavegate-system")
	for _, c := range []struct {
		name  string
		order int32
		want  string
	}{
		{"web", 3, "no tracked member (pods are not members); its pods wait for group migrate"},
		{"cache", 2, "no tracked member (pods are not members); its pods wait for group database"},
		{"zz", 2, "no tracked member (pods are not members); its pods wait for group migrate"},
	} {
		if got := podsOnlyMessage(plan, c.name, podGroup{order: c.order}); got != c.want {
			t.Errorf("%s at %d: %q, want %q", c.name, c.order, got, c.want)
		}
	}
}

// TestPodsOfAGroupOnlyAnotherPolicyRequires: a group that the plan has only because another
// namespace's policy requires it (it has no members), or whose members are all in other
// namespaces, is open once the groups before it are released; pods of the group in a namespace
// whose own policy requires more still wait for those groups. The no-early-release property found
// it: the pods went, as the plan said, without the database their policy requires before them.
func TestPodsOfAGroupOnlyAnotherPolicyRequires(t *testing.T) {
	elsewhere := openGroups([]*Group{{Name: "web", Order: 5, Open: true, Members: []Member{m("web", 5, "a", "web", 1)}}})
	if elsewhere.opens("web", func() podGroup { return podGroup{order: 5, requires: []string{"db"}} }) {
		t.Error("a pod of web in namespace b went without the group db b's policy requires, web's members being all in a")
	}
	if !elsewhere.opens("web", func() podGroup { return podGroup{order: 5} }) || !elsewhere.opens("web", nil) {
		t.Error("web's pods stayed gated with nothing required before it")
	}
	plan := []*Group{{Name: "config", Order: 5, Required: true, Open: true}}
	s := openGroups(plan)
	if s.opens("config", func() podGroup { return podGroup{order: 5, requires: []string{"db"}} }) {
		t.Error("pods of config went without the group db their own policy requires")
	}
	if !s.opens("config", func() podGroup { return podGroup{order: 5} }) {
		t.Error("pods of config whose policy requires nothing before it stayed gated")
	}
	plan = append(plan, &Group{Name: "db", Order: 1, Members: []Member{m("db", 1, "b", "db", 1)}, Released: true, Open: true})
	if !openGroups(plan).opens("config", func() podGroup { return podGroup{order: 5, requires: []string{"db"}} }) {
		t.Error("pods of config stayed gated with db in the plan")
	}
}

// TestStatusNamesTheGroupPodsWaitForInTheirPolicy: the pods of an open group that still wait for a
// group their own namespace's policy requires (it has no members yet; the group is in the plan
// for another namespace's members) are named in their group's status, and the sequence is not
// Ready: a group reported open with pods gated, and no word of why, was all a user saw.
func TestStatusNamesTheGroupPodsWaitForInTheirPolicy(t *testing.T) {
	idx := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "shop"}, Spec: wavev1.WavePolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}},
		Groups:            []wavev1.GroupSpec{{Name: "database", Order: 1, Required: true}, {Name: "web", Order: 3}}}}})
	s := testScheme(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "shop"}}}
	pod := gatedPod("web-1", "web", "a")
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&wavev1.Sequence{}).
		WithIndex(&corev1.Pod{}, PodSequenceIndex, func(o client.Object) []string { return []string{members.SequenceOf(o)} }).
		WithObjects(ns, pod).Build()
	r := &Reconciler{Client: c, APIReader: c}
	ctx := context.Background()
	// web is open: its only member is in another namespace, whose policy requires nothing.
	plan := []*Group{{Name: "web", Order: 3, Open: true, Released: true, Phase: wavev1.GroupReleased, Message: "ready",
		Members: []Member{m("web", 3, "storefront", "web", 1)}}}
	fresh := &freshView{r: r, seq: "shop", idx: idx, scope: newScope(c, "wavegate-system")}
	u, err := r.ungate(ctx, cachedPods(t, r), newOpener(openGroups(plan), func() (openness, error) { return openGroups(plan), nil }), fresh)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.pods) > 0 {
		t.Fatalf("released %s without the database its namespace's policy requires", u.pods[0].Name)
	}
	if d := cmp.Diff(map[string]string{"web": "database"}, u.requires); d != "" {
		t.Errorf("what web's pods wait for (-want +got):\n%s", d)
	}
	if _, err := r.writeStatus(ctx, "shop", plan, nil, u, &teardown.Result{}, nil, hold{}, &wavev1.Sequence{}); err != nil {
		t.Fatal(err)
	}
	cur := &wavev1.Sequence{}
	if err := c.Get(ctx, client.ObjectKey{Name: ObjectName("shop")}, cur); err != nil {
		t.Fatal(err)
	}
	const want = "ready; some of its pods wait for group database, which their namespace's policy requires and which has no members yet"
	if len(cur.Status.Groups) != 1 || cur.Status.Groups[0].Message != want || cur.Status.Groups[0].GatedPods != 1 {
		t.Errorf("groups %+v, want web with 1 gated pod and the message %q", cur.Status.Groups, want)
	}
	if cond := meta.FindStatusCondition(cur.Status.Conditions, "Ready"); cond == nil || cond.Status != metav1.ConditionFalse ||
		!strings.Contains(cond.Message, "wait for group database") {
		t.Errorf("Ready condition %+v, want False naming the database", cond)
	}
	metrics.Forget("shop")
}
