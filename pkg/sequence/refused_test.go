package sequence

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/policy"
)

// TestPlanRefused: an open group whose wait Job the API server refuses times out once its timeout
// has passed since the first refusal, and its policy's onTimeout applies; a refusal of a group that
// is not open counts for nothing (its clock starts when it opens).
func TestPlanRefused(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	members := func(onTimeout wavev1.OnTimeout) []Member {
		db, web := m("db", 1, "shop", "db", 1), m("web", 2, "shop", "web", 1)
		db.Resolution.Policy = &policy.Group{Name: "db", Order: 1, Timeout: time.Minute, OnTimeout: onTimeout}
		return []Member{db, web}
	}
	jobOf := func(ms []Member, group string) string {
		return "shop/" + JobName("shop", group, revision([]Member{byGroup(ms, group)}))
	}
	for name, tc := range map[string]struct {
		onTimeout wavev1.OnTimeout
		// refusedFor is how long ago the refused group's Job was first refused; group which one.
		refusedFor time.Duration
		group      string
		want       []phase
		wantJobRef []bool
	}{
		"within its timeout": {onTimeout: wavev1.OnTimeoutRelease, refusedFor: 59 * time.Second, group: "db",
			want: []phase{{"db", wavev1.GroupWaiting, true, false, false}, {"web", wavev1.GroupPending, false, false, true}}, wantJobRef: []bool{true, false}},
		"past its timeout, onTimeout Release": {onTimeout: wavev1.OnTimeoutRelease, refusedFor: time.Minute, group: "db",
			want: []phase{{"db", wavev1.GroupTimedOut, true, true, false}, {"web", wavev1.GroupWaiting, true, false, false}}, wantJobRef: []bool{true, false}},
		"past its timeout, onTimeout Block": {onTimeout: wavev1.OnTimeoutBlock, refusedFor: time.Hour, group: "db",
			want: []phase{{"db", wavev1.GroupTimedOut, true, false, false}, {"web", wavev1.GroupPending, false, false, false}}, wantJobRef: []bool{true, false}},
		"a group that is not open": {onTimeout: wavev1.OnTimeoutRelease, refusedFor: time.Hour, group: "web",
			want: []phase{{"db", wavev1.GroupWaiting, true, false, false}, {"web", wavev1.GroupPending, false, false, true}}, wantJobRef: []bool{false, false}},
	} {
		t.Run(name, func(t *testing.T) {
			ms := members(tc.onTimeout)
			refused := map[string]time.Time{jobOf(ms, tc.group): now.Add(-tc.refusedFor)}
			plan := planRefused("shop", ms, nil, func(*Group) JobState { return JobMissing }, "wavegate-system", refused, now)
			if diff := cmp.Diff(tc.want, phases(plan)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			var got []bool
			for _, g := range plan {
				got = append(got, g.JobRefused)
			}
			if diff := cmp.Diff(tc.wantJobRef, got); diff != "" {
				t.Errorf("JobRefused (-want +got):\n%s", diff)
			}
			// A group timed out for want of its Job still asks for it, unless that released it.
			starts := startJobs(plan)
			wantStart := !plan[0].Released
			if gotStart := len(starts) > 0 && starts[0].Name == "db"; gotStart != wantStart {
				t.Errorf("db's Job asked for: %v, want %v", gotStart, wantStart)
			}
		})
	}
}

// TestPlanRefusedChain: every wait Job refused (a quota on Jobs, say). The first group times out and
// releases the second, whose refusal counts from when it opened; once that has timed out too, the
// third group opens.
func TestPlanRefusedChain(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ms := []Member{m("db", 1, "shop", "db", 1), m("web", 2, "shop", "web", 1), m("api", 3, "shop", "api", 1)}
	for i, g := range []string{"db", "web"} {
		ms[i].Resolution.Policy = &policy.Group{Name: g, Order: int32(i + 1), Timeout: time.Minute, OnTimeout: wavev1.OnTimeoutRelease}
	}
	job := func(group string) string {
		return "shop/" + JobName("shop", group, revision([]Member{byGroup(ms, group)}))
	}
	for name, tc := range map[string]struct {
		webRefusedFor time.Duration
		want          []phase
	}{
		"the second within its timeout": {webRefusedFor: 30 * time.Second, want: []phase{
			{"db", wavev1.GroupTimedOut, true, true, false}, {"web", wavev1.GroupWaiting, true, false, false}, {"api", wavev1.GroupPending, false, false, true}}},
		"both past their timeouts": {webRefusedFor: time.Minute, want: []phase{
			{"db", wavev1.GroupTimedOut, true, true, false}, {"web", wavev1.GroupTimedOut, true, true, false}, {"api", wavev1.GroupWaiting, true, false, false}}},
	} {
		t.Run(name, func(t *testing.T) {
			refused := map[string]time.Time{job("db"): now.Add(-2 * time.Minute), job("web"): now.Add(-tc.webRefusedFor)}
			plan := planRefused("shop", ms, nil, func(*Group) JobState { return JobMissing }, "wavegate-system", refused, now)
			if diff := cmp.Diff(tc.want, phases(plan)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			if !plan[1].JobRefused {
				t.Errorf("web is not JobRefused: its refusal would be forgotten and its clock start again")
			}
		})
	}
}

// TestFrozenForgetsRefusals: while a sequence is frozen (a kind of its members unavailable) nothing
// tells whether a group with a refused wait Job stays open, so its clock starts again afterwards:
// the status and the memory forget when the refusal began.
func TestFrozenForgetsRefusals(t *testing.T) {
	s := runtime.NewScheme()
	if err := wavev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	since := metav1.NewTime(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	seq := &wavev1.Sequence{ObjectMeta: metav1.ObjectMeta{Name: ObjectName("shop")}, Spec: wavev1.SequenceSpec{Sequence: "shop"},
		Status: wavev1.SequenceStatus{Groups: []wavev1.GroupStatus{{Name: "db", WaitJob: "shop/wait-db", WaitJobRefusedSince: &since}}}}
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&wavev1.Sequence{}).WithObjects(seq).Build()
	r := &Reconciler{Client: c}
	r.refusals.note("shop", "shop/wait-db", since.Time)
	ctx := context.Background()
	prev := &wavev1.Sequence{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(seq), prev); err != nil {
		t.Fatal(err)
	}
	if _, err := r.frozen(ctx, prev, "a kind is unavailable"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(seq), prev); err != nil {
		t.Fatal(err)
	}
	if got := r.refusals.of("shop", prev, nil, since.Add(time.Minute)); len(got) != 0 {
		t.Errorf("refusals after a frozen pass: %v, want none", got)
	}
	// Nor from the Sequence as the next pass may still read it, before the frozen pass's write.
	if got := r.refusals.of("shop", seq, nil, since.Add(time.Minute)); len(got) != 0 {
		t.Errorf("refusals read back from the status before the frozen pass's write: %v, want none", got)
	}
}

func TestMinPositive(t *testing.T) {
	for _, tc := range []struct{ a, b, want time.Duration }{
		{0, 0, 0}, {0, time.Second, time.Second}, {time.Second, 0, time.Second},
		{time.Second, 2 * time.Second, time.Second}, {2 * time.Second, time.Second, time.Second}, {-time.Second, 0, 0},
	} {
		if got := minPositive(tc.a, tc.b); got != tc.want {
			t.Errorf("minPositive(%s, %s) = %s, want %s", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestReopenedGroupForgetsItsEarlierRefusal: a group whose wait Job was refused, that closes (an
// earlier group reopened) and opens again, times out on the clock of its new opening, not of the
// earlier one, although the next passes may still read the Sequence as it was before the pass that
// cleared the clock (the cache lags behind the status write). So does one whose clock a created Job
// reset. The status's time is read again after droppedTTL, as a restarted manager reads it.
func TestReopenedGroupForgetsItsEarlierRefusal(t *testing.T) {
	const job = "shop/wait-db"
	old := metav1.NewTime(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	stale := &wavev1.Sequence{Spec: wavev1.SequenceSpec{Sequence: "shop"},
		Status: wavev1.SequenceStatus{Groups: []wavev1.GroupStatus{{Name: "db", WaitJob: job, WaitJobRefusedSince: &old}}}}
	db := func(refused bool) []*Group {
		return []*Group{{Name: "db", JobNamespace: "shop", JobName: "wait-db", Open: refused, JobRefused: refused}}
	}
	created := []batchv1.Job{{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "wait-db"}}}
	for name, reset := range map[string]struct {
		plan []*Group
		jobs []batchv1.Job
	}{
		"the group closes":   {db(false), nil},
		"its Job is created": {db(false), created}, // the plan's group is not refused: its Job exists
	} {
		t.Run(name, func(t *testing.T) {
			var r refusals
			now := old.Add(20 * time.Minute)
			// Open and refused since 12:00, as the status says.
			got := r.of("shop", stale, nil, now)
			if d := cmp.Diff(map[string]time.Time{job: old.Time}, got); d != "" {
				t.Fatalf("refusals of the open group (-want +got):\n%s", d)
			}
			r.keepOnly("shop", db(true), stale, now)
			// The reset: this pass's status clears the clock, but the next passes read the old one.
			now = now.Add(time.Second)
			r.of("shop", stale, reset.jobs, now)
			r.keepOnly("shop", reset.plan, stale, now)
			for range 3 {
				now = now.Add(100 * time.Millisecond)
				if got := r.of("shop", stale, nil, now); len(got) != 0 {
					t.Fatalf("refusals read back from a status that has not caught up: %v, want none", got)
				}
				r.keepOnly("shop", db(false), stale, now)
			}
			// It reopens and its Job is refused again: the clock starts now.
			r.note("shop", job, now)
			want := now.Truncate(time.Second).Add(time.Second)
			if d := cmp.Diff(map[string]time.Time{job: want}, r.of("shop", stale, nil, now)); d != "" {
				t.Errorf("refusals after the group reopened (-want +got):\n%s", d)
			}
			r.keepOnly("shop", db(true), stale, now)
			// droppedTTL after the reset, the status is read again, as a restarted manager reads it.
			r.forget("shop")
			r.keepOnly("shop", db(false), stale, now)
			if got := r.of("shop", stale, nil, now.Add(droppedTTL+time.Second)); !got[job].Equal(old.Time) {
				t.Errorf("refusals droppedTTL after the reset: %v, want the status's %s", got, old.Time)
			}
			if len(r.dropped) != 0 {
				t.Errorf("resets remembered past droppedTTL: %v", r.dropped)
			}
		})
	}
}
