package sequence

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSettling: a sequence's groups open only once its members have stayed the same for
// membershipSettle; any change of a group's members (a revision) restarts the wait, and each
// sequence waits on its own.
func TestSettling(t *testing.T) {
	start := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	plan := func(revs ...string) []*Group {
		var out []*Group
		for i, r := range revs {
			out = append(out, &Group{Name: string(rune('a' + i)), Revision: r})
		}
		return out
	}
	var s settling
	steps := []struct {
		name string
		seq  string
		at   time.Duration
		plan []*Group
		want time.Duration
	}{
		{"first seen", "shop", 0, plan("r1"), membershipSettle},
		{"the same, a moment later", "shop", 100 * time.Millisecond, plan("r1"), membershipSettle - 100*time.Millisecond},
		{"a later group's member arrives", "shop", 120 * time.Millisecond, plan("r1", "w1"), membershipSettle},
		{"an earlier group's workload arrives", "shop", 200 * time.Millisecond, plan("r2", "w1"), membershipSettle},
		{"another sequence waits on its own", "blog", 250 * time.Millisecond, plan("b1"), membershipSettle},
		{"settled", "shop", 350 * time.Millisecond, plan("r2", "w1"), 0},
		{"and stays so", "shop", 5 * time.Second, plan("r2", "w1"), 0},
		{"an upgrade restarts it", "shop", 6 * time.Second, plan("r3", "w1"), membershipSettle},
	}
	for _, st := range steps {
		if d := cmp.Diff(st.want, s.wait(st.seq, st.plan, start.Add(st.at))); d != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, d)
		}
	}
	s.forget("shop")
	if got := s.wait("shop", plan("r3", "w1"), start.Add(7*time.Second)); got != membershipSettle {
		t.Errorf("a forgotten sequence waits %s, want %s", got, membershipSettle)
	}
}
