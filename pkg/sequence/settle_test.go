package sequence

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSettling: a sequence's groups open only once its members have stayed the same for
// membershipSettle; any change of a group's members (a revision) restarts the wait, each sequence
// waits on its own, and members that never stop changing hold the groups for MembershipSettleMax
// at most.
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
	var s settling
	steps := []struct {
		name string
		seq  string
		at   time.Duration
		plan []*Group
		want got
	}{
		{"first seen", "shop", 0, plan("r1"), got{membershipSettle, 0}},
		{"the same, a moment later", "shop", 100 * time.Millisecond, plan("r1"), got{membershipSettle - 100*time.Millisecond, 100 * time.Millisecond}},
		{"a later group's member arrives", "shop", 120 * time.Millisecond, plan("r1", "w1"), got{membershipSettle, 120 * time.Millisecond}},
		{"an earlier group's workload arrives", "shop", 200 * time.Millisecond, plan("r2", "w1"), got{membershipSettle, 200 * time.Millisecond}},
		{"another sequence waits on its own", "blog", 250 * time.Millisecond, plan("b1"), got{membershipSettle, 0}},
		{"settled", "shop", 350 * time.Millisecond, plan("r2", "w1"), got{}},
		{"and stays so", "shop", 5 * time.Second, plan("r2", "w1"), got{}},
		{"an upgrade restarts it", "shop", 6 * time.Second, plan("r3", "w1"), got{membershipSettle, 0}},
		{"a change less than membershipSettle later goes on with them", "shop", 6*time.Second + 100*time.Millisecond, plan("r4", "w1"), got{membershipSettle, 100 * time.Millisecond}},
	}
	for _, st := range steps {
		var g got
		g.Wait, g.Changing = s.wait(st.seq, st.plan, start.Add(st.at))
		if d := cmp.Diff(st.want, g); d != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, d)
		}
	}
	// Members that keep changing hold the groups until MembershipSettleMax after the first change,
	// and not after it while they go on: changes every 100 ms from 6 s on.
	churn := func(seq string, first, from, to, every time.Duration) {
		t.Helper()
		for at := from; at <= to; at += every {
			want := got{min(membershipSettle, first+MembershipSettleMax-at), at - first}
			if want.Wait <= 0 {
				want = got{}
			}
			var g got
			g.Wait, g.Changing = s.wait(seq, plan(at.String(), "w1"), start.Add(at))
			if d := cmp.Diff(want, g); d != "" {
				t.Fatalf("%s: members changing for %s (-want +got):\n%s", seq, at-first, d)
			}
		}
	}
	first := 6 * time.Second
	last := first + MembershipSettleMax + time.Second
	churn("shop", first, first+200*time.Millisecond, last, 100*time.Millisecond)
	// A pass that finds the members quiet (the one the settle requeues) ends the changes: the next
	// change holds the groups again.
	if w, _ := s.wait("shop", plan(last.String(), "w1"), start.Add(last+membershipSettle)); w != 0 {
		t.Errorf("quiet members wait %s, want 0", w)
	}
	if w, _ := s.wait("shop", plan("r9", "w1"), start.Add(last+time.Second)); w != membershipSettle {
		t.Errorf("a change after a quiet pass waits %s, want %s", w, membershipSettle)
	}
	// Passes slower than the changes (each sees a new change, more than membershipSettle after
	// the last it saw) cannot tell a pause from a slow pass: the changes go on, and are bounded.
	churn("slow", 0, 0, MembershipSettleMax+time.Second, 200*time.Millisecond)
	s.forget("shop")
	if w, _ := s.wait("shop", plan("r3", "w1"), start.Add(time.Hour)); w != membershipSettle {
		t.Errorf("a forgotten sequence waits %s, want %s", w, membershipSettle)
	}
}
