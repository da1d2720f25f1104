package sequence

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"wavegate.io/wavegate/pkg/policy"
)

// TestSettling: a sequence's groups open only once its members have stayed the same for the
// settle (membershipSettle, or paceFactor times the apply's longest gap between changes); any
// change of a group's members (a revision) restarts the wait, each sequence waits on its own, and
// members that never stop changing hold the groups for MembershipSettleMax at most.
func TestSettling(t *testing.T) {
	start := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	plan := func(revs ...string) []*Group {
		var out []*Group
		for i, r := range revs {
			out = append(out, &Group{Name: string(rune('a' + i)), Revision: r})
		}
		return out
	}
	type got struct{ Wait, Changing time.Duration }
	ms := time.Millisecond
	const pf = paceFactor
	var s settling
	steps := []struct {
		name string
		seq  string
		at   time.Duration
		plan []*Group
		want got
	}{
		{"first seen", "shop", 0, plan("r1"), got{membershipSettle, 0}},
		{"the same, a moment later", "shop", 100 * ms, plan("r1"), got{membershipSettle - 100*ms, 100 * ms}},
		{"a later group's member arrives 120 ms after the first: the apply's pace", "shop", 120 * ms, plan("r1", "w1"), got{pf * 120 * ms, 120 * ms}},
		{"an earlier group's workload arrives sooner after it", "shop", 200 * ms, plan("r2", "w1"), got{pf * 120 * ms, 200 * ms}},
		{"another sequence waits on its own", "blog", 250 * ms, plan("b1"), got{membershipSettle, 0}},
		{"membershipSettle is not enough after an apply this slow", "shop", 350 * ms, plan("r2", "w1"), got{pf*120*ms - 150*ms, 350 * ms}},
		{"settled", "shop", 200*ms + pf*120*ms, plan("r2", "w1"), got{}},
		{"and stays so", "shop", 5 * time.Second, plan("r2", "w1"), got{}},
		{"an upgrade, more than paceHorizon after the last change, restarts it afresh", "shop", 6 * time.Second, plan("r3", "w1"), got{membershipSettle, 0}},
		{"a change soon after goes on with it", "shop", 6*time.Second + 40*ms, plan("r4", "w1"), got{max(membershipSettle, pf*40*ms), 40 * ms}},

		// Argo CD on a slow machine: the database's Service alone settles, and the database opens
		// on it; the web's Deployment comes 200 ms after it, the database's StatefulSet and the
		// migration's Job 200 ms apart after that. The gap after the quiet pass sets the pace.
		{"a slow sync's first object", "argo", 0, plan("svc"), got{membershipSettle, 0}},
		{"settles alone", "argo", 150 * ms, plan("svc"), got{}},
		{"the later group's Deployment", "argo", 200 * ms, plan("svc", "web"), got{pf * 200 * ms, 0}},
		{"the earlier group's StatefulSet, within the settle", "argo", 400 * ms, plan("svc+sts", "web"), got{pf * 200 * ms, 200 * ms}},
		{"the migration's Job", "argo", 600 * ms, plan("svc+sts", "web", "job"), got{pf * 200 * ms, 400 * ms}},
		{"not settled 150 ms after it", "argo", 750 * ms, plan("svc+sts", "web", "job"), got{pf*200*ms - 150*ms, 550 * ms}},
		{"settled paceFactor gaps after it", "argo", 600*ms + pf*200*ms, plan("svc+sts", "web", "job"), got{}},
		{"paceHorizon is the longest gap an apply's pace counts", "argo", 600*ms + paceHorizon, plan("svc+sts", "web2", "job"), got{paceFactor * paceHorizon, 0}},
		{"settled", "argo", 1600*ms + paceFactor*paceHorizon, plan("svc+sts", "web2", "job"), got{}},
		{"a longer gap starts afresh", "argo", 1700*ms + paceFactor*paceHorizon, plan("svc+sts", "web3", "job"), got{membershipSettle, 0}},
	}
	wait := func(seq string, plan []*Group, at time.Duration) got {
		h := s.wait(seq, plan, readAt(start.Add(at)), MembershipSettleMax)
		return got{h.Wait, h.Changing}
	}
	for _, st := range steps {
		g := wait(st.seq, st.plan, st.at)
		if d := cmp.Diff(st.want, g); d != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, d)
		}
	}
	// Members that keep changing hold the groups until MembershipSettleMax after the first change,
	// and not after it while they go on.
	churn := func(seq string, first, from, to, every time.Duration) {
		t.Helper()
		settle := membershipSettle
		if every <= paceHorizon {
			settle = max(settle, paceFactor*every)
		}
		for at := from; at <= to; at += every {
			want := got{min(settle, first+MembershipSettleMax-at), at - first}
			if want.Wait <= 0 {
				want = got{}
			}
			g := wait(seq, plan(at.String(), "w1"), at)
			if d := cmp.Diff(want, g); d != "" {
				t.Fatalf("%s: members changing for %s (-want +got):\n%s", seq, at-first, d)
			}
		}
	}
	// Changes every 40 ms from 6 s on (the settle paceFactor times that), then every 100 ms (the
	// settle grows with it).
	first := 6 * time.Second
	churn("shop", first, first+80*ms, first+time.Second, 40*ms)
	churn("shop", first, first+time.Second+100*ms, first+MembershipSettleMax+time.Second, 100*ms)
	last := first + MembershipSettleMax + time.Second
	// The bound has let the groups open, but a pass must still come to find the members quiet:
	// without it, the changes would never end, and the next apply would get no settle at all.
	if h := s.wait("shop", plan(last.String(), "w1"), readAt(start.Add(last)), MembershipSettleMax); h.Wait != 0 || h.Recheck != paceFactor*100*ms {
		t.Errorf("members changing past the bound: wait %s, recheck %s; want 0 and %s", h.Wait, h.Recheck, paceFactor*100*ms)
	}
	// A pass that finds the members quiet (the one the settle requeues) ends the changes: the next
	// change holds the groups again.
	if h := s.wait("shop", plan(last.String(), "w1"), readAt(start.Add(last+paceFactor*100*ms)), MembershipSettleMax); h != (hold{Settle: paceFactor * 100 * ms}) {
		t.Errorf("quiet members: %+v, want no wait and no recheck", h)
	}
	// A change a pass dates by its read came some time after the pass before began reading: a
	// gap that may be shorter than paceHorizon keeps the pace; one surely longer starts afresh.
	if w := wait("shop", plan("r9", "w1"), last+paceFactor*100*ms+paceHorizon+time.Nanosecond); w != (got{paceFactor * 100 * ms, 0}) {
		t.Errorf("a change dated just over paceHorizon after the last, by a read %s after it: %+v, want the pace kept (%s)", paceFactor*100*ms, w, paceFactor*100*ms)
	}
	quietAgain := last + paceFactor*100*ms + 2*paceHorizon + 100*ms
	if w := wait("shop", plan("r9", "w1"), quietAgain); w != (got{}) {
		t.Errorf("quiet again: %+v, want no wait", w)
	}
	if w := wait("shop", plan("r10", "w1"), quietAgain+2*paceHorizon); w != (got{membershipSettle, 0}) {
		t.Errorf("a change surely more than paceHorizon after the last (a pass saw the members unchanged in between): %+v, want a fresh %s", w, membershipSettle)
	}
	// Passes slower than the changes (each sees a new change, more than the settle after the last
	// it saw) cannot tell a pause from a slow pass: the changes go on, and are bounded.
	churn("slow", 0, 0, MembershipSettleMax+2*time.Second, paceHorizon+100*ms)
	// A forgotten sequence starts afresh, its pace with it.
	wait("paced", plan("a"), 0)
	wait("paced", plan("b"), 500*ms)
	s.forget("paced")
	if w := wait("paced", plan("c"), 600*ms); w != (got{membershipSettle, 0}) {
		t.Errorf("a forgotten sequence: %+v, want a fresh %s", w, membershipSettle)
	}
}

// readAt is a read at one moment that knows no member's arrival: changes are dated by it.
func readAt(at time.Time) reading { return reading{started: at, ended: at} }

// TestSettlingDatesChangesByArrival: a member's change is dated by when the informer received its
// object so, not by the pass that reads it, when that came after the pass before began reading;
// any other change (a member gone, a policy changed, an object the informer received earlier, an
// arrival not known) by the end of the read.
func TestSettlingDatesChangesByArrival(t *testing.T) {
	start := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	at := func(d time.Duration) time.Time { return start.Add(d) }
	type member struct {
		uid   string
		gen   int64
		group string
	}
	plan := func(ms ...member) []*Group {
		var out []*Group
		byName := map[string]*Group{}
		for _, m := range ms {
			g := byName[m.group]
			if g == nil {
				g = &Group{Name: m.group}
				byName[m.group] = g
				out = append(out, g)
			}
			g.Members = append(g.Members, Member{UID: types.UID(m.uid), Generation: m.gen})
		}
		for _, g := range out {
			g.Revision = revision(g.Members)
		}
		return out
	}
	policies, otherPolicies := &policy.Index{}, &policy.Index{}
	type pass struct {
		name           string
		started, ended time.Duration
		policies       *policy.Index
		members        []member
		arrived        map[string]time.Duration
		wait, settle   time.Duration
	}
	db, db2, web, web2 := member{"db", 1, "g0"}, member{"db", 2, "g0"}, member{"web", 1, "g1"}, member{"web", 2, "g1"}
	moved := member{"web", 1, "g0"}
	cases := []struct {
		name   string
		passes []pass
	}{{
		// The benchmark's apply: the second Deployment arrives 20 ms after the first, while the pass
		// that saw the first is busy; the next pass, 60 ms later, dates it by its arrival.
		name: "two Deployments of one apply",
		passes: []pass{
			{"the first, a sequence not seen before: a settle from the read", 5 * ms, 6 * ms, policies, []member{db}, map[string]time.Duration{"db": 0}, membershipSettle, membershipSettle},
			{"the second, read 60 ms after it arrived", 80 * ms, 81 * ms, policies, []member{db, web}, map[string]time.Duration{"db": 0, "web": 20 * ms}, membershipSettle - 61*ms, membershipSettle},
			{"settled", 170 * ms, 171 * ms, policies, []member{db, web}, map[string]time.Duration{"db": 0, "web": 20 * ms}, 0, membershipSettle},
		},
	}, {
		name: "the gaps between arrivals the first pass sees set the pace",
		passes: []pass{
			{"both", 300 * ms, 301 * ms, policies, []member{db, web}, map[string]time.Duration{"db": 0, "web": 100 * ms}, paceFactor * 100 * ms, paceFactor * 100 * ms},
		},
	}, {
		name: "the gaps between arrivals one pass sees set the pace",
		passes: []pass{
			{"db", 0, 1 * ms, policies, []member{db}, map[string]time.Duration{"db": 0}, membershipSettle, membershipSettle},
			{"quiet", 2 * time.Second, 2*time.Second + ms, policies, []member{db}, map[string]time.Duration{"db": 0}, 0, membershipSettle},
			{"both changed", 3 * time.Second, 3*time.Second + ms, policies, []member{db2, web}, map[string]time.Duration{"db": 2900 * ms, "web": 3 * time.Second}, paceFactor*100*ms - ms, paceFactor * 100 * ms},
		},
	}, {
		name: "a change the informer received a settle before the pass that reads it holds nothing",
		passes: []pass{
			{"db", 0, 1 * ms, policies, []member{db}, map[string]time.Duration{"db": 0}, membershipSettle, membershipSettle},
			{"web, read late", 400 * ms, 401 * ms, policies, []member{db, web}, map[string]time.Duration{"db": 0, "web": 20 * ms}, 0, membershipSettle},
		},
	}, {
		name: "a new generation is dated by its arrival",
		passes: []pass{
			{"db", 0, 1 * ms, policies, []member{db}, map[string]time.Duration{"db": 0}, membershipSettle, membershipSettle},
			{"quiet", 2 * time.Second, 2*time.Second + ms, policies, []member{db}, map[string]time.Duration{"db": 0}, 0, membershipSettle},
			{"db changed", 3 * time.Second, 3*time.Second + ms, policies, []member{db2}, map[string]time.Duration{"db": 3*time.Second - 50*ms}, membershipSettle - 51*ms, membershipSettle},
		},
	}, {
		name: "an arrival before the last pass began reading is not what changed: a policy or a namespace moved it",
		passes: []pass{
			{"both", 0, 1 * ms, policies, []member{db, web}, map[string]time.Duration{"db": 0, "web": 0}, membershipSettle, membershipSettle},
			{"web moved to db's group", 2 * time.Second, 2*time.Second + ms, policies, []member{db, moved}, map[string]time.Duration{"db": 0, "web": 0}, membershipSettle, membershipSettle},
		},
	}, {
		name: "a changed policy dates every change by the read",
		passes: []pass{
			{"both", 0, 1 * ms, policies, []member{db, web}, map[string]time.Duration{"db": 0, "web": 0}, membershipSettle, membershipSettle},
			{"web changed, with a new policy", 2 * time.Second, 2*time.Second + ms, otherPolicies, []member{db, web2}, map[string]time.Duration{"db": 0, "web": 2 * time.Second}, membershipSettle, membershipSettle},
		},
	}, {
		name: "a member gone is dated by the read",
		passes: []pass{
			{"both", 0, 1 * ms, policies, []member{db, web}, map[string]time.Duration{"db": 0, "web": 0}, membershipSettle, membershipSettle},
			{"web gone", 2 * time.Second, 2*time.Second + ms, policies, []member{db}, map[string]time.Duration{"db": 0}, membershipSettle, membershipSettle},
		},
	}, {
		name: "an unknown arrival is dated by the read",
		passes: []pass{
			{"db", 0, 1 * ms, policies, []member{db}, map[string]time.Duration{"db": 0}, membershipSettle, membershipSettle},
			{"web", 100 * ms, 101 * ms, policies, []member{db, web}, map[string]time.Duration{"db": 0}, paceFactor * 101 * ms, paceFactor * 101 * ms},
		},
	}, {
		name: "a member gone beside a change dated by its arrival: the read dates them",
		passes: []pass{
			{"both", 0, 1 * ms, policies, []member{db, web}, map[string]time.Duration{"db": 0, "web": 0}, membershipSettle, membershipSettle},
			{"web gone, db changed", 2 * time.Second, 2*time.Second + ms, policies, []member{db2}, map[string]time.Duration{"db": 2*time.Second - 50*ms}, paceFactor * 51 * ms, paceFactor * 51 * ms},
		},
	}, {
		name: "a restarted manager's first pass holds a settle, however long ago the list was",
		passes: []pass{
			{"the first pass", 300 * ms, 301 * ms, policies, []member{db, web}, map[string]time.Duration{"db": 0, "web": 0}, membershipSettle, membershipSettle},
		},
	}, {
		// Passes that could not reach the settle (the tracker re-listing, the sequence frozen on an
		// unavailable kind) for longer than MembershipSettleMax: the changes they missed are dated
		// by their arrivals, long past, and the bound counts from the pass that sees them.
		name: "changes dated long before the pass that sees them still hold the groups",
		passes: []pass{
			{"db", 0, 1 * ms, policies, []member{db}, map[string]time.Duration{"db": 0}, membershipSettle, membershipSettle},
			{"quiet", 2 * time.Second, 2*time.Second + ms, policies, []member{db}, map[string]time.Duration{"db": 0}, 0, membershipSettle},
			{"40 s later", 40 * time.Second, 40*time.Second + ms, policies, []member{db2, web}, map[string]time.Duration{"db": 5 * time.Second, "web": 40*time.Second - 9*ms}, membershipSettle - 10*ms, membershipSettle},
		},
	}}
	cases = append(cases, []struct {
		name   string
		passes []pass
	}{{
		// The hold was still in force when passes stopped reaching the settle for longer than the
		// bound: the changes seen after are a new run.
		name: "changes after passes that could not reach the settle for longer than its bound hold the groups",
		passes: []pass{
			{"db", 0, 1 * ms, policies, []member{db}, map[string]time.Duration{"db": 0}, membershipSettle, membershipSettle},
			{"40 s later", 40 * time.Second, 40*time.Second + ms, policies, []member{db2}, map[string]time.Duration{"db": 40*time.Second - 9*ms}, membershipSettle - 10*ms, membershipSettle},
		},
	}, {
		name: "a member gone as another joins: the read dates them",
		passes: []pass{
			{"both", 0, 1 * ms, policies, []member{db, web}, map[string]time.Duration{"db": 0, "web": 0}, membershipSettle, membershipSettle},
			{"quiet", 2 * time.Second, 2*time.Second + ms, policies, []member{db, web}, map[string]time.Duration{"db": 0, "web": 0}, 0, membershipSettle},
			{"web gone, api joined", 3 * time.Second, 3*time.Second + ms, policies, []member{db, {"api", 1, "g1"}}, map[string]time.Duration{"db": 0, "api": 2900 * ms}, paceFactor * 101 * ms, paceFactor * 101 * ms},
		},
	}}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s settling
			for _, p := range c.passes {
				rd := reading{started: at(p.started), ended: at(p.ended), policies: p.policies, arrived: map[types.UID]time.Time{}}
				for uid, d := range p.arrived {
					rd.arrived[types.UID(uid)] = at(d)
				}
				h := s.wait("shop", plan(p.members...), rd, MembershipSettleMax)
				if d := cmp.Diff([2]time.Duration{p.wait, p.settle}, [2]time.Duration{h.Wait, h.Settle}); d != "" {
					t.Errorf("%s: wait and settle (-want +got):\n%s", p.name, d)
				}
			}
		})
	}
}

// TestSettlingDatesANamespaceChangeByTheRead: a member that changed while its namespace's labels
// changed too (what moved it may be the namespace: a policy selecting it, its opt-in) is dated by
// the read, not by its object's arrival.
func TestSettlingDatesANamespaceChangeByTheRead(t *testing.T) {
	start := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	policies := &policy.Index{}
	plan := func(gen int64) []*Group {
		g := &Group{Name: "db", Members: []Member{{UID: "db", Generation: gen}}}
		g.Revision = revision(g.Members)
		return []*Group{g}
	}
	read := func(at time.Duration, nsLabels map[string]string, arrived time.Duration) reading {
		return reading{started: start.Add(at), ended: start.Add(at + ms), policies: policies,
			namespaces: map[string]string{"shop": labels.Set(nsLabels).String()}, arrived: map[types.UID]time.Time{"db": start.Add(arrived)}}
	}
	var s settling
	s.wait("shop", plan(1), read(0, map[string]string{"team": "a"}, 0), MembershipSettleMax)
	s.wait("shop", plan(1), read(2*time.Second, map[string]string{"team": "a"}, 0), MembershipSettleMax)
	h := s.wait("shop", plan(2), read(3*time.Second, map[string]string{"team": "b"}, 2500*ms), MembershipSettleMax)
	if h.Wait != membershipSettle {
		t.Errorf("a change beside a namespace relabeled: wait %s, want %s (dated by the read)", h.Wait, membershipSettle)
	}
}
