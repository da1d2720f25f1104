package sequence

import (
	"fmt"
	"math/rand/v2"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/resolve"
)

// The property test simulates a sequence under churn and checks wavegate's one promise: no pod of a
// new template is released while an earlier group is not verified ready at its current revision.
// The controller is modelled with the real Plan and the real decision (the opener that Reconcile
// uses; startJobs, which creates waiters unarmed as soon as the cache shows their group open or
// next; and armJobs, which arms them through the opener): it plans on a cache that lags the
// world by a random number of steps and opens a group (arms its wait Job, removes gates) through
// the opener, whose consistent read is the world. Pods created while a pass reads and decides are
// gated (admission has not heard of the pass's clearances); the pass releases those of the
// templates it clears, in their group (the stragglers), and each such release is checked too.
// Restarts lose nothing because the controller keeps no state: the world (Jobs, Sequence status)
// is all there is.
//
// Half the sequences are shared: their members and pods live in three namespaces whose own
// policies (or none) define the groups with their own orders, required groups, onTimeout and
// readiness settings (whether a LoadBalancer needs an address). There the promise is checked
// against what each namespace's policy says, computed here from the policies and not by Plan: a
// group released on its waiter must have had every member ready by its own namespace's settings
// when the waiter succeeded, one released on its timeout only if every member's policy says
// Release, and every group a member's (or the pod's) policy requires must be released first.

type simMember struct {
	uid        types.UID
	ns         string
	group      int
	generation int64
	ready      bool // ready at its current generation
	address    bool // has a LoadBalancer address: what stricter readiness settings wait for
}

type simPod struct {
	ns       string
	group    int
	template string
	gated    bool
}

// simSettings are the readiness settings a wait Job's waiter judges by, from its arguments.
type simSettings struct {
	readiness   wavev1.Readiness
	byNamespace map[string]wavev1.Readiness
}

type simWorld struct {
	rng     *rand.Rand
	seq     string
	groups  []string
	orders  []int32
	idx     *policy.Index
	members []*simMember
	jobs    map[string]JobState // wait Jobs by name
	armed   map[string]bool     // wait Jobs with a deadline
	jobRev  map[string]struct{ group, rev string }
	// shared: members and pods in several namespaces, each with its own policy (or none).
	shared     bool
	namespaces []string
	settings   map[string]simSettings // wait Jobs' arguments, by name
	dishonest  map[string]string      // wait Jobs whose waiter succeeded by another policy's settings: why
	pods       []*simPod
	cleared    map[string]map[string]bool // Sequence status: group -> templates
	history    [][]*simMember             // snapshots, for a lagging cache
	// clearedHistory are snapshots of cleared, for admission's lagging cache of the status.
	clearedHistory []map[string]map[string]bool
	nextUID        int
	nextPod        int
	releases       int
	stragglers     int
	// sharedReleases are the releases in shared sequences; byNamespace the waiters' successes that
	// judged a member by its namespace's own settings (the Job named them): what the shared mode
	// must exercise to prove anything.
	sharedReleases, byNamespace int
	steps                       int
}

func newWorld(rng *rand.Rand, n int) *simWorld {
	w := &simWorld{rng: rng, seq: fmt.Sprintf("seq-%d", n), jobs: map[string]JobState{}, armed: map[string]bool{},
		jobRev: map[string]struct{ group, rev string }{}, cleared: map[string]map[string]bool{},
		settings: map[string]simSettings{}, dishonest: map[string]string{}}
	groups := 2 + rng.IntN(4)
	var specs []wavev1.GroupSpec
	for i := range groups {
		w.groups = append(w.groups, fmt.Sprintf("g%d", i))
		w.orders = append(w.orders, int32(i*10+rng.IntN(10)))
		specs = append(specs, wavev1.GroupSpec{Name: w.groups[i], Order: w.orders[i], Required: rng.IntN(3) == 0})
	}
	w.shared = n%2 == 1
	if !w.shared {
		w.namespaces = []string{w.seq}
		if rng.IntN(2) == 0 {
			w.idx = policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: wavev1.WavePolicySpec{Groups: specs}}})
		}
		return w
	}
	// Each namespace's policy (one has none, sometimes) defines some of the groups, near the
	// orders of the labels: the namespaces disagree on a group's order now and then, never on
	// which group comes first (a disagreement the Sequence's status names as a misconfiguration).
	for i := range w.orders {
		w.orders[i] = int32(i*10 + rng.IntN(7))
	}
	var policies []wavev1.WavePolicy
	for _, ns := range []string{"a", "b", "c"} {
		w.namespaces = append(w.namespaces, ns)
		if rng.IntN(4) == 0 {
			continue
		}
		var gs []wavev1.GroupSpec
		for i, name := range w.groups {
			if rng.IntN(4) == 0 {
				continue
			}
			spec := wavev1.GroupSpec{Name: name, Order: w.orders[i] + int32(rng.IntN(3)), Required: rng.IntN(3) == 0}
			if rng.IntN(2) == 0 {
				spec.OnTimeout = wavev1.OnTimeoutRelease
			}
			gs = append(gs, spec)
		}
		policies = append(policies, wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "p-" + ns}, Spec: wavev1.WavePolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": ns}},
			Groups:            gs, Readiness: wavev1.Readiness{LoadBalancerIngress: rng.IntN(2) == 0}}})
	}
	w.idx = policy.Compile(policies)
	return w
}

// policyGroup is how a namespace's policy defines a group (false: it does not; the group's order
// comes from its label, and the built-in defaults apply).
func (w *simWorld) policyGroup(ns string, group int) (policy.Group, bool) {
	if !w.shared {
		return w.idx.Group(w.groups[group])
	}
	return w.idx.For(ns, map[string]string{"team": ns}, w.seq).Group(w.groups[group])
}

// orderIn is a group's order for a member or pod of namespace ns.
func (w *simWorld) orderIn(ns string, group int) int32 {
	if g, ok := w.policyGroup(ns, group); ok {
		return g.Order
	}
	return w.orders[group]
}

// readyByItsPolicy is whether a member is ready by its own namespace's policy, as it is now.
func (w *simWorld) readyByItsPolicy(m *simMember) bool {
	g, ok := w.policyGroup(m.ns, m.group)
	return m.ready && (!ok || !w.idx.Readiness(g.Policy).LoadBalancerIngress || m.address)
}

func (w *simWorld) snapshot() []*simMember {
	out := make([]*simMember, len(w.members))
	for i, m := range w.members {
		c := *m
		out[i] = &c
	}
	return out
}

func (w *simWorld) toMembers(ms []*simMember) []Member {
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		res := &resolve.Resolution{Sequence: w.seq, Group: w.groups[m.group], GroupOrder: w.orders[m.group]}
		if g, ok := w.policyGroup(m.ns, m.group); ok {
			res.Policy, res.GroupOrder = &g, g.Order
		}
		out = append(out, Member{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			APIVersion: "apps/v1", Kind: "Deployment", Namespace: m.ns, Name: string(m.uid), UID: m.uid,
			Generation: m.generation, Resolution: res})
	}
	return out
}

func (w *simWorld) plan(ms []*simMember) []*Group {
	return Plan(w.seq, w.toMembers(ms), w.idx, func(g *Group) JobState {
		name := g.JobName
		if s, ok := w.jobs[name]; ok {
			return s
		}
		return JobMissing
	}, "wavegate-system")
}

// reconcile is the controller: it plans on the lagging cache and decides through the product's
// opener, whose second opinion is a plan on the world as it is (the consistent read).
func (w *simWorld) reconcile(t *testing.T) {
	lag := w.rng.IntN(len(w.history) + 1)
	cached := w.history[len(w.history)-lag:]
	var view []*simMember
	if len(cached) > 0 {
		view = cached[0]
	} else {
		view = w.snapshot()
	}
	cachePlan := w.plan(view)
	var during []*simPod
	gate := newOpener(openGroups(cachePlan), func() (openness, error) {
		open := openGroups(w.plan(w.snapshot()))
		for range w.rng.IntN(3) {
			during = append(during, w.admit())
		}
		return open, nil
	})
	for _, g := range startJobs(cachePlan) {
		if _, exists := w.jobs[g.JobName]; exists {
			continue // AlreadyExists: the cache had not seen it
		}
		w.jobs[g.JobName] = JobRunning
		w.jobRev[g.JobName] = struct{ group, rev string }{g.Name, g.Revision}
		// The Job's arguments, as waitJob encodes them from the plan.
		w.settings[g.JobName] = simSettings{readiness: g.Readiness, byNamespace: g.NamespaceReadiness}
	}
	arm, _ := armJobs(cachePlan, gate, func(g *Group) bool {
		_, exists := w.jobs[g.JobName]
		return exists && !w.armed[g.JobName]
	})
	for _, g := range arm {
		w.armed[g.JobName] = true
	}
	u := &ungated{released: map[string][]string{}}
	for _, p := range w.pods {
		if !p.gated {
			continue
		}
		name := w.groups[p.group]
		// A group without members (none yet, or none any more) is not in the plans: its pods go as
		// an empty group's at their order would.
		if release, _ := gate.OpenPods(name, func() podGroup { return w.position(p) }); release {
			w.checkRelease(t, p)
			p.gated = false
			u.releasing(name, p.template)
			if w.cleared[name] == nil {
				w.cleared[name] = map[string]bool{}
			}
			w.cleared[name][p.template] = true
		}
	}
	for _, p := range during {
		if p.gated && u.straggler(w.groups[p.group], p.template) {
			w.checkRelease(t, p)
			p.gated = false
			w.stragglers++
		}
	}
	w.pods = append(w.pods, during...)
	for _, g := range cachePlan {
		if !g.Open {
			delete(w.cleared, g.Name)
		}
	}
}

// admit is a pod created now, as admission lets it in: a new template, or another pod of an
// existing one.
func (w *simWorld) admit() *simPod {
	g := w.rng.IntN(len(w.groups))
	ns := w.namespaces[w.rng.IntN(len(w.namespaces))]
	// A template is its controller's (its UID in admission's token): in one namespace.
	tpl := fmt.Sprintf("%s/t%d", ns, w.rng.IntN(4))
	if w.rng.IntN(2) == 0 {
		tpl = fmt.Sprintf("%s/new%d", ns, w.nextPod)
	}
	w.nextPod++
	// Admission reads the status from its own cache, which may lag: a pod of a template cleared
	// a moment ago can still be gated.
	seen := w.cleared
	if lag := w.rng.IntN(len(w.clearedHistory) + 1); lag > 0 {
		seen = w.clearedHistory[len(w.clearedHistory)-lag]
	}
	return &simPod{ns: ns, group: g, template: tpl, gated: !seen[w.groups[g]][tpl]}
}

// position is where a pod's group stands for it when no member has it (podGroup): its order and
// the groups its namespace's policy requires before it.
func (w *simWorld) position(p *simPod) podGroup {
	pg := podGroup{order: w.orderIn(p.ns, p.group)}
	if g, ok := w.policyGroup(p.ns, p.group); ok {
		for _, r := range w.idx.PolicyGroups(g.Policy) {
			if r.Required && r.Order < pg.order {
				pg.requires = append(pg.requires, r.Name)
			}
		}
	}
	return pg
}

// checkRelease asserts the promise against the world as it is when the pod is released: every
// earlier group is released (honestly: see dishonest and the timeout's rule), and every group that
// the pod's policy, or the policy of a member of its group, requires before it is released.
func (w *simWorld) checkRelease(t *testing.T, p *simPod) {
	t.Helper()
	w.releases++
	if w.shared {
		w.sharedReleases++
	}
	name := w.groups[p.group]
	plan := w.plan(w.snapshot())
	// The group's order: the lowest its members give it (each by its own namespace's policy or
	// label), else the pod's. The groups that come first: those its members' policies require
	// before that order, and those the pod's own policy requires before the pod's order.
	order, members := w.position(p).order, 0
	requiredBy := map[string]int32{} // policy: before which order
	for _, m := range w.members {
		if m.group != p.group {
			continue
		}
		if members == 0 || w.orderIn(m.ns, m.group) < order {
			order = w.orderIn(m.ns, m.group)
		}
		members++
	}
	for _, m := range w.members {
		if g, ok := w.policyGroup(m.ns, m.group); ok && m.group == p.group {
			requiredBy[g.Policy] = order
		}
	}
	if g, ok := w.policyGroup(p.ns, p.group); ok {
		requiredBy[g.Policy] = max(requiredBy[g.Policy], g.Order)
	}
	released := map[string]bool{}
	for _, g := range plan {
		released[g.Name] = g.Released
	}
	for pol, before := range requiredBy {
		for _, r := range w.idx.PolicyGroups(pol) {
			if r.Required && r.Order < before && r.Name != name && !released[r.Name] {
				t.Fatalf("%s: pod of group %s (template %s, namespace %s) released while group %s, which policy %s requires before it, is not released",
					w.seq, name, p.template, p.ns, r.Name, pol)
			}
		}
	}
	for _, g := range plan {
		if g.Name == name || g.Order > order || g.Order == order && g.Name > name {
			break
		}
		if !g.Released {
			t.Fatalf("%s: pod of group %s (template %s) released while earlier group %s is %s at revision %s",
				w.seq, name, p.template, g.Name, g.Phase, g.Revision)
		}
		if why := w.dishonest[g.JobName]; why != "" && g.JobState == JobComplete {
			t.Fatalf("%s: pod of group %s (template %s) released after earlier group %s, whose waiter %s", w.seq, name, p.template, g.Name, why)
		}
		if g.JobState == JobTimedOut {
			for _, m := range g.Members {
				if pg := m.Resolution.Policy; pg == nil || pg.OnTimeout != wavev1.OnTimeoutRelease {
					t.Fatalf("%s: pod of group %s (template %s) released after earlier group %s timed out, although member %s/%s's policy does not say Release",
						w.seq, name, p.template, g.Name, m.Namespace, m.Name)
				}
			}
		}
	}
}

// waiter completes running Jobs whose members are all ready now, as the real waiter watches them,
// whether their group is open or their waiter started ahead of its turn.
func (w *simWorld) waiter() {
	for name, s := range w.jobs {
		if s != JobRunning {
			continue
		}
		jr := w.jobRev[name]
		var ms []*simMember
		for _, m := range w.members {
			if w.groups[m.group] == jr.group {
				ms = append(ms, m)
			}
		}
		// The Job names its members at its revision; a member removed since is "not found".
		cur := w.plan(w.members)
		still := false
		for _, g := range cur {
			if g.Name == jr.group && g.Revision == jr.rev {
				still = true
			}
		}
		// The waiter judges each member by its Job's arguments: the settings of the member's
		// namespace where the Job names them, else the group's.
		ready, honest, own := still && len(ms) > 0, true, false
		set := w.settings[name]
		for _, m := range ms {
			rd, ok := set.byNamespace[m.ns]
			if !ok {
				rd = set.readiness
			}
			own = own || ok
			ready = ready && m.ready && (!rd.LoadBalancerIngress || m.address)
			honest = honest && w.readyByItsPolicy(m)
		}
		switch {
		case ready:
			w.jobs[name] = JobComplete
			if own {
				w.byNamespace++
			}
			if !honest {
				w.dishonest[name] = "judged a member by another namespace's readiness settings"
			}
		case w.armed[name] && w.rng.IntN(20) == 0: // only an armed Job has a deadline
			w.jobs[name] = JobTimedOut
		case w.rng.IntN(50) == 0: // its waiter kept failing, armed or not
			w.jobs[name] = JobWaiterFailed
		}
	}
}

func (w *simWorld) step(t *testing.T) {
	w.steps++
	choice := w.rng.IntN(9)
	if w.shared && w.steps > 60 && choice <= 3 {
		// A shared sequence's members settle after a while, so that groups of members in several
		// namespaces get all ready under their waiters (more members change more often).
		choice = 4 + w.rng.IntN(5)
	}
	switch choice {
	case 0, 1: // a member is added (any group, any time: apply order is arbitrary)
		w.nextUID++
		w.members = append(w.members, &simMember{uid: types.UID(fmt.Sprintf("u%d", w.nextUID)), group: w.rng.IntN(len(w.groups)), generation: 1,
			ns: w.namespaces[w.rng.IntN(len(w.namespaces))], address: w.shared && w.rng.IntN(2) == 0})
	case 2: // a member is removed
		if len(w.members) > 0 {
			i := w.rng.IntN(len(w.members))
			w.members = append(w.members[:i], w.members[i+1:]...)
		}
	case 3: // an upgrade: new generation, not ready until it rolls out
		if len(w.members) > 0 {
			m := w.members[w.rng.IntN(len(w.members))]
			m.generation++
			m.ready = false
		}
	case 4: // readiness flips, or a LoadBalancer address comes or goes
		if len(w.members) > 0 {
			m := w.members[w.rng.IntN(len(w.members))]
			switch {
			case !w.shared:
				m.ready = !m.ready
			case w.rng.IntN(3) == 0:
				m.address = !m.address
			default:
				// More members, in more namespaces: a group is all ready less often than in one
				// namespace, unless readiness comes more often than it goes.
				m.ready = w.rng.IntN(4) != 0
			}
		}
	case 5:
		w.pods = append(w.pods, w.admit())
	case 6: // the wait Jobs run
		w.waiter()
	default: // the controller reconciles (possibly a freshly restarted one)
		w.reconcile(t)
	}
	w.history = append(w.history, w.snapshot())
	if len(w.history) > 5 {
		w.history = w.history[1:]
	}
	c := make(map[string]map[string]bool, len(w.cleared))
	for g, ts := range w.cleared {
		c[g] = make(map[string]bool, len(ts))
		for tpl := range ts {
			c[g][tpl] = true
		}
	}
	w.clearedHistory = append(w.clearedHistory, c)
	if len(w.clearedHistory) > 3 {
		w.clearedHistory = w.clearedHistory[1:]
	}
}

func TestNoEarlyRelease(t *testing.T) {
	const sequences = 1500
	total, stragglers, shared, byNamespace := 0, 0, 0, 0
	for n := range sequences {
		w := newWorld(rand.New(rand.NewPCG(uint64(n), 42)), n)
		for range 120 {
			w.step(t)
		}
		total += w.releases
		stragglers += w.stragglers
		shared += w.sharedReleases
		byNamespace += w.byNamespace
	}
	// The test must be able to fail: it has to have released many pods to prove anything.
	if total < sequences {
		t.Fatalf("only %d releases in %d sequences: the simulation does not exercise releases", total, sequences)
	}
	// Fewer in shared sequences, whose templates are each in one of three namespaces.
	if stragglers < sequences/12 {
		t.Fatalf("only %d stragglers released in %d sequences: the simulation does not exercise them", stragglers, sequences)
	}
	if shared < sequences/3 || byNamespace < sequences/100 {
		t.Fatalf("%d releases in shared sequences, %d waiters judging a member by its namespace's own settings: the shared sequences do not exercise them",
			shared, byNamespace)
	}
	t.Logf("%d sequences, %d gated pods released (%d in shared sequences), %d of them stragglers, %d waiters judged a member by its namespace's settings (no early release)",
		sequences, total, shared, stragglers, byNamespace)
}
