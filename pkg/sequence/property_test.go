package sequence

import (
	"fmt"
	"math/rand/v2"
	"slices"
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

type simMember struct {
	uid        types.UID
	group      int
	generation int64
	ready      bool // ready at its current generation
}

type simPod struct {
	group    int
	template string
	gated    bool
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
	pods    []*simPod
	cleared map[string]map[string]bool // Sequence status: group -> templates
	history [][]*simMember             // snapshots, for a lagging cache
	// clearedHistory are snapshots of cleared, for admission's lagging cache of the status.
	clearedHistory []map[string]map[string]bool
	nextUID        int
	nextPod        int
	releases       int
	stragglers     int
}

func newWorld(rng *rand.Rand, n int) *simWorld {
	w := &simWorld{rng: rng, seq: fmt.Sprintf("seq-%d", n), jobs: map[string]JobState{}, armed: map[string]bool{},
		jobRev: map[string]struct{ group, rev string }{}, cleared: map[string]map[string]bool{}}
	groups := 2 + rng.IntN(4)
	var specs []wavev1.GroupSpec
	for i := range groups {
		w.groups = append(w.groups, fmt.Sprintf("g%d", i))
		w.orders = append(w.orders, int32(i*10+rng.IntN(10)))
		specs = append(specs, wavev1.GroupSpec{Name: w.groups[i], Order: w.orders[i], Required: rng.IntN(3) == 0})
	}
	if rng.IntN(2) == 0 {
		w.idx = policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: wavev1.WavePolicySpec{Groups: specs}}})
	}
	return w
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
		if g, ok := w.idx.Group(res.Group); ok {
			res.Policy = &g
		}
		out = append(out, Member{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			APIVersion: "apps/v1", Kind: "Deployment", Namespace: w.seq, Name: string(m.uid), UID: m.uid,
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
		if release, _ := gate.OpenPods(name, func() podGroup { return w.position(p.group) }); release {
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
	tpl := fmt.Sprintf("t%d", w.rng.IntN(4))
	if w.rng.IntN(2) == 0 {
		tpl = fmt.Sprintf("new%d", w.nextPod)
	}
	w.nextPod++
	// Admission reads the status from its own cache, which may lag: a pod of a template cleared
	// a moment ago can still be gated.
	seen := w.cleared
	if lag := w.rng.IntN(len(w.clearedHistory) + 1); lag > 0 {
		seen = w.clearedHistory[len(w.clearedHistory)-lag]
	}
	return &simPod{group: g, template: tpl, gated: !seen[w.groups[g]][tpl]}
}

// position is where a group stands for its pods when no member has it (podGroup): its order and the
// groups its policy requires before it.
func (w *simWorld) position(group int) podGroup {
	pg := podGroup{order: w.orders[group]}
	if _, ok := w.idx.Group(w.groups[group]); ok {
		for _, g := range w.idx.PolicyGroups("p") {
			if g.Required && g.Order < pg.order {
				pg.requires = append(pg.requires, g.Name)
			}
		}
	}
	return pg
}

// checkRelease asserts the promise against the world as it is when the pod is released: every
// earlier group is released, and every group the pod's policy requires before it has members.
func (w *simWorld) checkRelease(t *testing.T, p *simPod) {
	t.Helper()
	w.releases++
	plan := w.plan(w.snapshot())
	for _, r := range w.position(p.group).requires {
		if !slices.ContainsFunc(plan, func(g *Group) bool { return g.Name == r }) {
			t.Fatalf("%s: pod of group %s (template %s) released while the required group %s has no members",
				w.seq, w.groups[p.group], p.template, r)
		}
	}
	for _, g := range plan {
		if g.Order >= w.orders[p.group] {
			break
		}
		if !g.Released {
			t.Fatalf("%s: pod of group %s (template %s) released while earlier group %s is %s at revision %s",
				w.seq, w.groups[p.group], p.template, g.Name, g.Phase, g.Revision)
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
		ready := still && len(ms) > 0
		for _, m := range ms {
			ready = ready && m.ready
		}
		switch {
		case ready:
			w.jobs[name] = JobComplete
		case w.armed[name] && w.rng.IntN(20) == 0: // only an armed Job has a deadline
			w.jobs[name] = JobTimedOut
		case w.rng.IntN(50) == 0: // its waiter kept failing, armed or not
			w.jobs[name] = JobWaiterFailed
		}
	}
}

func (w *simWorld) step(t *testing.T) {
	switch w.rng.IntN(9) {
	case 0, 1: // a member is added (any group, any time: apply order is arbitrary)
		w.nextUID++
		w.members = append(w.members, &simMember{uid: types.UID(fmt.Sprintf("u%d", w.nextUID)), group: w.rng.IntN(len(w.groups)), generation: 1})
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
	case 4: // readiness flips
		if len(w.members) > 0 {
			m := w.members[w.rng.IntN(len(w.members))]
			m.ready = !m.ready
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
	total, stragglers := 0, 0
	for n := range sequences {
		w := newWorld(rand.New(rand.NewPCG(uint64(n), 42)), n)
		for range 120 {
			w.step(t)
		}
		total += w.releases
		stragglers += w.stragglers
	}
	// The test must be able to fail: it has to have released many pods to prove anything.
	if total < sequences {
		t.Fatalf("only %d releases in %d sequences: the simulation does not exercise releases", total, sequences)
	}
	if stragglers < sequences/10 {
		t.Fatalf("only %d stragglers released in %d sequences: the simulation does not exercise them", stragglers, sequences)
	}
	t.Logf("%d sequences, %d gated pods released, %d of them stragglers (no early one)", sequences, total, stragglers)
}
