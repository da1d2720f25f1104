package sequence

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/resolve"
	"wavegate.io/wavegate/pkg/waiter"
)

func m(group string, order int32, ns, name string, gen int64) Member {
	return Member{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: name, UID: types.UID(name), Generation: gen,
		Resolution: &resolve.Resolution{Group: group, GroupOrder: order}}
}

type phase struct {
	Name     string
	Phase    wavev1.GroupPhase
	Open     bool
	Released bool
	Prestart bool
}

func phases(gs []*Group) []phase {
	out := make([]phase, len(gs))
	for i, g := range gs {
		out[i] = phase{g.Name, g.Phase, g.Open, g.Released, g.Prestart}
	}
	return out
}

func TestPlan(t *testing.T) {
	members := []Member{m("web", 3, "shop", "web", 1), m("db", 1, "shop", "db", 1), m("migrate", 2, "shop", "migrate", 1)}
	states := func(state map[string]JobState) JobStates {
		return func(g *Group) JobState {
			name := g.JobName
			for g, s := range state {
				if name == JobName("shop", g, revision([]Member{byGroup(members, g)})) {
					return s
				}
			}
			return JobMissing
		}
	}
	complete := func(done ...string) JobStates {
		m := map[string]JobState{}
		for _, g := range done {
			m[g] = JobComplete
		}
		return states(m)
	}
	required := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: wavev1.WavePolicySpec{
		Groups: []wavev1.GroupSpec{{Name: "db", Order: 1, Required: true}, {Name: "web", Order: 3}}}}})
	webOnly := []Member{m("web", 3, "shop", "web", 1)}
	webOnly[0].Resolution.Policy = func() *policy.Group { g, _ := required.Group("web"); return &g }()
	// The same policy selecting namespaces: its groups are not in the root index, only in the view
	// of the namespaces it selects, and its required group must block all the same.
	scoped := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: wavev1.WavePolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		Groups:            []wavev1.GroupSpec{{Name: "db", Order: 1, Required: true}, {Name: "web", Order: 3}}}}})
	webScoped := []Member{m("web", 3, "shop", "web", 1)}
	webScoped[0].Resolution.Policy = func() *policy.Group {
		g, _ := scoped.For("shop", map[string]string{"team": "a"}, "shop").Group("web")
		return &g
	}()

	cases := map[string]struct {
		members []Member
		idx     *policy.Index
		jobs    JobStates
		want    []phase
	}{
		"nothing released: the next group's waiter starts ahead": {members: members, jobs: complete(), want: []phase{
			{"db", wavev1.GroupWaiting, true, false, false}, {"migrate", wavev1.GroupPending, false, false, true}, {"web", wavev1.GroupPending, false, false, false}}},
		"first released": {members: members, jobs: complete("db"), want: []phase{
			{"db", wavev1.GroupReleased, true, true, false}, {"migrate", wavev1.GroupWaiting, true, false, false}, {"web", wavev1.GroupPending, false, false, true}}},
		"a later group's old Job does not open it early": {members: members, jobs: complete("migrate"), want: []phase{
			{"db", wavev1.GroupWaiting, true, false, false}, {"migrate", wavev1.GroupPending, false, true, true}, {"web", wavev1.GroupPending, false, false, false}}},
		"a pre-started waiter that succeeded releases its group once the earlier one is": {members: members,
			jobs: states(map[string]JobState{"db": JobComplete, "migrate": JobComplete, "web": JobRunning}), want: []phase{
				{"db", wavev1.GroupReleased, true, true, false}, {"migrate", wavev1.GroupReleased, true, true, false}, {"web", wavev1.GroupWaiting, true, false, false}}},
		"no waiter starts ahead of a failed group": {members: members, jobs: states(map[string]JobState{"db": JobFailed}), want: []phase{
			{"db", wavev1.GroupFailed, true, false, false}, {"migrate", wavev1.GroupPending, false, false, false}, {"web", wavev1.GroupPending, false, false, false}}},
		"a waiter that kept failing blocks as a failed member does": {members: members, jobs: states(map[string]JobState{"db": JobWaiterFailed}), want: []phase{
			{"db", wavev1.GroupFailed, true, false, false}, {"migrate", wavev1.GroupPending, false, false, false}, {"web", wavev1.GroupPending, false, false, false}}},
		"no waiter starts ahead of a timed-out group": {members: members, jobs: states(map[string]JobState{"db": JobComplete, "migrate": JobTimedOut}), want: []phase{
			{"db", wavev1.GroupReleased, true, true, false}, {"migrate", wavev1.GroupTimedOut, true, false, false}, {"web", wavev1.GroupPending, false, false, false}}},
		"all released": {members: members, jobs: complete("db", "migrate", "web"), want: []phase{
			{"db", wavev1.GroupReleased, true, true, false}, {"migrate", wavev1.GroupReleased, true, true, false}, {"web", wavev1.GroupReleased, true, true, false}}},
		"a required group without members blocks, and nothing starts ahead of it": {members: webOnly, idx: required, jobs: complete(), want: []phase{
			{"db", wavev1.GroupWaiting, true, false, false}, {"web", wavev1.GroupPending, false, false, false}}},
		"a required group of a policy that selects namespaces blocks": {members: webScoped, idx: scoped, jobs: complete(), want: []phase{
			{"db", wavev1.GroupWaiting, true, false, false}, {"web", wavev1.GroupPending, false, false, false}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Plan("shop", tc.members, tc.idx, tc.jobs, "wavegate-system")
			if diff := cmp.Diff(tc.want, phases(got)); diff != "" {
				t.Errorf("Plan (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestPlanGroupOrderMembersDisagreeOn: two members of group db give it orders 1 and 5, web has 3.
// Whatever order the members are listed in (the tracker's is a map's), db plans at 1, before web,
// and says why; taking the first member's order let web open before db in some passes.
func TestPlanGroupOrderMembersDisagreeOn(t *testing.T) {
	members := []Member{m("db", 5, "shop", "settings", 1), m("web", 3, "shop", "web", 1), m("db", 1, "shop", "db", 1)}
	want := []phase{{"db", wavev1.GroupWaiting, true, false, false}, {"web", wavev1.GroupPending, false, false, true}}
	for i := range members {
		listed := append(slices.Clone(members[i:]), members[:i]...)
		got := Plan("shop", listed, nil, func(*Group) JobState { return JobMissing }, "wavegate-system")
		if diff := cmp.Diff(want, phases(got)); diff != "" {
			t.Errorf("Plan of %v (-want,+got):\n%s", listed, diff)
		}
		if got[0].Order != 1 || !strings.Contains(got[0].Message, "different orders [1 5]") {
			t.Errorf("group db: order %d, message %q; want order 1 and a message naming both orders", got[0].Order, got[0].Message)
		}
	}
}

func byGroup(ms []Member, g string) Member {
	for _, m := range ms {
		if m.Resolution.Group == g {
			return m
		}
	}
	return Member{}
}

func TestRevisionChangesWithMembersAndGenerations(t *testing.T) {
	a := revision([]Member{m("db", 1, "ns", "a", 1)})
	for name, ms := range map[string][]Member{
		"new generation": {m("db", 1, "ns", "a", 2)},
		"member added":   {m("db", 1, "ns", "a", 1), m("db", 1, "ns", "b", 1)},
		"member removed": {},
	} {
		if revision(ms) == a {
			t.Errorf("%s: revision did not change", name)
		}
	}
	if revision([]Member{m("db", 1, "ns", "a", 1)}) != a {
		t.Error("revision is not deterministic")
	}
}

func TestNames(t *testing.T) {
	if got := JobName("shop", "Database_Primary", "abc"); len(got) > 63 || got != JobName("shop", "Database_Primary", "abc") {
		t.Errorf("JobName = %q: must be deterministic and at most 63 characters", got)
	}
	for seq, want := range map[string]string{"shop": "shop", "shop.db": "shop.db", "GPU_stack": "gpu-stack-", "team.Db_.x": "team-db--x-"} {
		if got := ObjectName(seq); len(got) < len(want) || got[:len(want)] != want {
			t.Errorf("ObjectName(%q) = %q, want prefix %q", seq, got, want)
		}
	}
	// Every name is a valid object name, and none is another sequence's: a namespace named after a
	// shared sequence's object name (shop-<hash of "Shop">) gets an object of its own.
	shared := ObjectName("Shop")
	names := map[string]string{}
	for _, seq := range []string{"Shop", shared, "shop", "SHOP", "team.Db_.x", "a_.b", "x-0123abcd", "x-0123abcd-" + "ffffffff"} {
		got := ObjectName(seq)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("ObjectName(%q) = %q: %v", seq, got, errs)
		}
		if other, ok := names[got]; ok {
			t.Errorf("ObjectName(%q) = ObjectName(%q) = %q", seq, other, got)
		}
		names[got] = seq
	}
}

func TestArmDeadline(t *testing.T) {
	created := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		now     time.Time
		timeout time.Duration
		want    int64
	}{
		"armed at creation":                {created, 10 * time.Minute, 600},
		"armed 42.3 s after creation":      {created.Add(42300 * time.Millisecond), 10 * time.Minute, 643},
		"a timeout under a second":         {created, 100 * time.Millisecond, 1},
		"a clock behind the creation time": {created.Add(-2 * time.Second), 10 * time.Second, 8},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := armDeadline(created, tc.now, tc.timeout); got != tc.want {
				t.Errorf("armDeadline = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestStartAndArmJobs: a wait Job is created, unarmed, as soon as the cache shows its group open
// or next; it is armed only when the opener's consistent read opens the group too.
func TestStartAndArmJobs(t *testing.T) {
	members := []Member{m("db", 1, "shop", "db", 1), m("web", 2, "shop", "web", 1), m("ui", 3, "shop", "ui", 1)}
	cached := Plan("shop", members, nil, func(*Group) JobState { return JobMissing }, "wavegate-system")
	names := func(gs []*Group) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.Name)
		}
		return out
	}
	if diff := cmp.Diff([]string{"db", "web"}, names(startJobs(cached))); diff != "" {
		t.Errorf("startJobs (-want +got):\n%s", diff)
	}
	exists := func(*Group) bool { return true }
	for _, tc := range []struct {
		name    string
		fresh   map[string]bool
		unarmed func(*Group) bool
		want    []string
	}{
		{"the consistent read opens db", map[string]bool{"db": true}, exists, []string{"db"}},
		// A cache that has not seen an earlier group: the Job stays unarmed (deleteStaleJobs removes it).
		{"the consistent read does not", map[string]bool{}, exists, nil},
		{"already armed", map[string]bool{"db": true}, func(*Group) bool { return false }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			gate := newOpener(openGroups(cached), func() (openness, error) { reads++; return opens(tc.fresh), nil })
			got, err := armJobs(cached, gate, tc.unarmed)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, names(got)); diff != "" {
				t.Errorf("armJobs (-want +got):\n%s", diff)
			}
			if reads > 1 {
				t.Errorf("%d consistent reads, want at most one", reads)
			}
		})
	}
}

// TestDisarmJobs: a wait Job armed when its group opened loses its deadline once the group is no
// longer open (an earlier group changed) while the Job still runs, so that the group's timeout
// counts from when it reopens; a Job that finished, or one never armed, is left as it is.
func TestDisarmJobs(t *testing.T) {
	members := []Member{m("db", 1, "shop", "db", 1), m("web", 2, "shop", "web", 1), m("ui", 3, "shop", "ui", 1)}
	for _, tc := range []struct {
		name  string
		state map[string]JobState
		armed []string
		want  []string
	}{
		{"db released, web open and armed", map[string]JobState{"db": JobComplete, "web": JobRunning},
			[]string{"db", "web"}, nil},
		{"db changed, its new Job running: web closes", map[string]JobState{"db": JobRunning, "web": JobRunning},
			[]string{"web"}, []string{"web"}},
		{"db changed, its new Job not created yet", map[string]JobState{"db": JobMissing, "web": JobRunning},
			[]string{"web"}, []string{"web"}},
		{"db changed: web's waiter, started ahead, was never armed", map[string]JobState{"db": JobRunning, "web": JobRunning},
			nil, nil},
		{"db changed: a released web stays released", map[string]JobState{"db": JobRunning, "web": JobComplete, "ui": JobRunning},
			[]string{"web", "ui"}, []string{"ui"}},
		{"db changed: web and ui both close", map[string]JobState{"db": JobRunning, "web": JobRunning, "ui": JobRunning},
			[]string{"web", "ui"}, []string{"web", "ui"}},
		{"db changed: web had timed out, ui had failed", map[string]JobState{"db": JobRunning, "web": JobTimedOut, "ui": JobFailed},
			[]string{"web", "ui"}, nil},
		{"db failed: web, armed before db changed, closes", map[string]JobState{"db": JobFailed, "web": JobRunning},
			[]string{"web"}, []string{"web"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := Plan("shop", members, nil, func(g *Group) JobState {
				name := g.JobName
				for g, s := range tc.state {
					if strings.HasPrefix(name, "wavegate-wait-"+g+"-") {
						return s
					}
				}
				return JobMissing
			}, "wavegate-system")
			var got []string
			for _, g := range disarmJobs(plan, func(g *Group) bool { return slices.Contains(tc.armed, g.Name) }) {
				got = append(got, g.Name)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("disarmed (-want +got):\n%s", d)
			}
		})
	}
}

// TestPlanReadinessOfEachNamespace: the policies of namespaces a and b define group instances of a
// shared sequence with different readiness settings, and namespace c's member has no policy. The
// group takes its settings from the member that orders it (namespace a's), and the wait Job's
// waiter is told the others' by namespace, so that it judges each member as the status does: by
// its own. Whatever order the members are listed in.
func TestPlanReadinessOfEachNamespace(t *testing.T) {
	policies := []wavev1.WavePolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: wavev1.WavePolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
			Groups:            []wavev1.GroupSpec{{Name: "instances", Order: 2}},
			Readiness:         wavev1.Readiness{LoadBalancerIngress: true}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: wavev1.WavePolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}},
			Groups:            []wavev1.GroupSpec{{Name: "instances", Order: 2}},
			Readiness:         wavev1.Readiness{AssumeReadyWithoutConditions: true}}},
	}
	idx := policy.Compile(policies)
	member := func(ns string) Member {
		mb := m("instances", 2, ns, "w", 1)
		mb.GVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
		if ns != "c" {
			g, _ := idx.For(ns, map[string]string{"team": ns}, "platform").Group("instances")
			mb.Resolution.Policy = &g
		}
		return mb
	}
	members := []Member{member("a"), member("b"), member("c")}
	wantNamespaces := map[string]wavev1.Readiness{"b": {AssumeReadyWithoutConditions: true}, "c": {}}
	for i := range members {
		listed := append(slices.Clone(members[i:]), members[:i]...)
		g := Plan("platform", listed, idx, func(*Group) JobState { return JobMissing }, "wavegate-system")[0]
		if diff := cmp.Diff(wavev1.Readiness{LoadBalancerIngress: true}, g.Readiness); diff != "" {
			t.Errorf("the group's readiness, members listed from %s (-want,+got):\n%s", listed[0].Namespace, diff)
		}
		if diff := cmp.Diff(wantNamespaces, g.NamespaceReadiness); diff != "" {
			t.Errorf("the readiness by namespace, members listed from %s (-want,+got):\n%s", listed[0].Namespace, diff)
		}
		args, err := waiter.ParseArgs((&Reconciler{Image: "wavegate:test"}).waitJob("platform", g).Spec.Template.Spec.Containers[0].Args)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantNamespaces, args.NamespaceReadiness); diff != "" {
			t.Errorf("the waiter's readiness by namespace (-want,+got):\n%s", diff)
		}
	}
	// One policy for every member: nothing by namespace.
	other := member("a")
	other.Name, other.UID = "w2", "w2"
	same := Plan("platform", []Member{member("a"), other}, idx, func(*Group) JobState { return JobMissing }, "wavegate-system")[0]
	if same.NamespaceReadiness != nil {
		t.Errorf("members of one policy got readiness by namespace: %v", same.NamespaceReadiness)
	}
}

// TestPlanTimeoutOfEachNamespace: the policies of two namespaces of a shared sequence give group
// instances different timeouts. The group waits as long as the longest, and is released on its
// timeout only if every member's policy says so (a member without a policy: the defaults, 10
// minutes and Block), whichever member orders it and whatever order they are listed in.
func TestPlanTimeoutOfEachNamespace(t *testing.T) {
	group := func(ns string, timeout time.Duration, onTimeout wavev1.OnTimeout) wavev1.WavePolicy {
		return wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: wavev1.WavePolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": ns}},
			Groups:            []wavev1.GroupSpec{{Name: "instances", Order: 2, Timeout: &metav1.Duration{Duration: timeout}, OnTimeout: onTimeout}}}}
	}
	idx := policy.Compile([]wavev1.WavePolicy{
		group("fast", time.Minute, wavev1.OnTimeoutRelease), group("slow", 5*time.Minute, wavev1.OnTimeoutRelease),
		group("strict", 2*time.Minute, wavev1.OnTimeoutBlock)})
	member := func(ns string) Member {
		mb := m("instances", 2, ns, "w", 1)
		if ns != "none" {
			g, _ := idx.For(ns, map[string]string{"team": ns}, "platform").Group("instances")
			mb.Resolution.Policy = &g
		}
		return mb
	}
	type settings struct {
		Timeout   time.Duration
		OnTimeout wavev1.OnTimeout
	}
	cases := map[string]struct {
		namespaces []string
		want       settings
	}{
		"all release: the longest timeout":       {[]string{"fast", "slow"}, settings{5 * time.Minute, wavev1.OnTimeoutRelease}},
		"one blocks: block":                      {[]string{"fast", "strict"}, settings{2 * time.Minute, wavev1.OnTimeoutBlock}},
		"a member without a policy: the default": {[]string{"fast", "none"}, settings{10 * time.Minute, wavev1.OnTimeoutBlock}},
		"one policy":                             {[]string{"fast", "fast"}, settings{time.Minute, wavev1.OnTimeoutRelease}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, first := range []int{0, 1} {
				listed := []Member{member(tc.namespaces[first]), member(tc.namespaces[1-first])}
				if tc.namespaces[0] == tc.namespaces[1] {
					listed[1].Name = "w2"
				}
				g := Plan("platform", listed, idx, func(*Group) JobState { return JobMissing }, "wavegate-system")[0]
				if diff := cmp.Diff(tc.want, settings{g.Timeout, g.OnTimeout}); diff != "" {
					t.Errorf("members listed from %s (-want,+got):\n%s", listed[0].Namespace, diff)
				}
			}
		})
	}
}

// TestPlanRequiredByEachNamespace: in a shared sequence, namespace b's policy requires group db
// before web, namespace a's defines web alone. Group web has members in both; whichever orders it
// (a's, whose reference sorts first), web waits for db while db has no members: each member's
// policy requires its own groups. Before, only the policy of the member that orders the group
// counted, so b's pods went ahead of the database b requires.
func TestPlanRequiredByEachNamespace(t *testing.T) {
	idx := policy.Compile([]wavev1.WavePolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: wavev1.WavePolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
			Groups:            []wavev1.GroupSpec{{Name: "web", Order: 2}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: wavev1.WavePolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}},
			Groups:            []wavev1.GroupSpec{{Name: "db", Order: 1, Required: true}, {Name: "web", Order: 2}}}},
	})
	member := func(ns string) Member {
		mb := m("web", 2, ns, "web", 1)
		g, _ := idx.For(ns, map[string]string{"team": ns}, "platform").Group("web")
		mb.Resolution.Policy = &g
		return mb
	}
	want := []phase{{"db", wavev1.GroupWaiting, true, false, false}, {"web", wavev1.GroupPending, false, false, false}}
	for _, listed := range [][]Member{{member("a"), member("b")}, {member("b"), member("a")}} {
		got := Plan("platform", listed, idx, func(*Group) JobState { return JobMissing }, "wavegate-system")
		if diff := cmp.Diff(want, phases(got)); diff != "" {
			t.Errorf("Plan, members listed from %s (-want,+got):\n%s", listed[0].Namespace, diff)
		}
	}
}

// TestPlanIsTheSameWhateverTheListingOrder: random shared sequences whose namespaces' policies
// define the same groups with random orders, timeouts, onTimeout, readiness and required groups.
// The controller plans on its cache and again on a consistent read, which list the members in
// different orders: the two plans must be the same, in every setting a group takes from several
// members' policies.
func TestPlanIsTheSameWhateverTheListingOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 24))
	namespaces := []string{"a", "b", "c", "d"}
	for run := range 300 {
		var policies []wavev1.WavePolicy
		for _, ns := range namespaces[:3] { // namespace d has no policy: the defaults
			var groups []wavev1.GroupSpec
			for i, name := range []string{"g0", "g1", "g2", "g3"} {
				if rng.IntN(4) == 0 {
					continue
				}
				gs := wavev1.GroupSpec{Name: name, Order: int32(i*10 + rng.IntN(3)), Required: rng.IntN(3) == 0,
					Timeout: &metav1.Duration{Duration: time.Duration(1+rng.IntN(5)) * time.Minute}}
				if rng.IntN(2) == 0 {
					gs.OnTimeout = wavev1.OnTimeoutRelease
				}
				groups = append(groups, gs)
			}
			policies = append(policies, wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: wavev1.WavePolicySpec{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": ns}},
				Groups:            groups,
				Readiness:         randomReadiness(rng)}})
		}
		idx := policy.Compile(policies)
		var members []Member
		for i := range 2 + rng.IntN(8) {
			ns := namespaces[rng.IntN(len(namespaces))]
			name := fmt.Sprintf("g%d", rng.IntN(4))
			mb := m(name, 0, ns, fmt.Sprintf("m%d", i), 1)
			if g, ok := idx.For(ns, map[string]string{"team": ns}, "platform").Group(name); ok {
				mb.Resolution.Policy, mb.Resolution.GroupOrder = &g, g.Order
			} else {
				mb.Resolution.GroupOrder = int32(rng.IntN(40))
			}
			members = append(members, mb)
		}
		jobs := func(g *Group) JobState { return JobState(len(g.JobName) % 3) } // some Missing, Running, Complete
		want := Plan("platform", members, idx, jobs, "wavegate-system")
		for _, g := range want {
			// A wait Job made for the group judges by its settings: else each pass would replace it.
			if g.JobName != "" && staleWaiter((&Reconciler{Image: "wavegate:test"}).waitJob("platform", g), g) {
				t.Fatalf("run %d: the wait Job made for group %s does not judge by the group's settings: it would be replaced for ever", run, g.Name)
			}
		}
		for range 5 {
			listed := slices.Clone(members)
			rng.Shuffle(len(listed), func(i, j int) { listed[i], listed[j] = listed[j], listed[i] })
			got := Plan("platform", listed, idx, jobs, "wavegate-system")
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("run %d: the plan depends on the listing order (-first,+shuffled):\n%s", run, diff)
			}
		}
	}
}

// randomReadiness is a policy's readiness settings, some of them empty.
func randomReadiness(rng *rand.Rand) wavev1.Readiness {
	rd := wavev1.Readiness{AssumeReadyWithoutConditions: rng.IntN(2) == 0, LoadBalancerIngress: rng.IntN(2) == 0}
	switch rng.IntN(3) {
	case 0:
		rd.Rules = []wavev1.ReadinessRule{}
	case 1:
		rd.Rules = []wavev1.ReadinessRule{{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.status.phase == 'Ready'"}}
	}
	return rd
}
