package sequence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/readiness"
	"wavegate.io/wavegate/pkg/teardown"
)

// TestWriteStatusCoalescesCounts: a status that differs only in its counts of gated pods or ready
// members (and the summary that repeats them) is written at most once per statusCountsPeriod (the
// reconcile comes back for it), an unchanged status is not written, and any other change is
// written at once. Members that have kept changing for settleReported or longer are the Ready
// condition's reason.
func TestWriteStatusCoalescesCounts(t *testing.T) {
	s := testScheme(t)
	writes := 0
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&wavev1.Sequence{}).
		WithIndex(&corev1.Pod{}, PodSequenceIndex, func(o client.Object) []string { return []string{members.SequenceOf(o)} }).Build(),
		interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			writes++
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		}})
	start := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	now := start
	r := &Reconciler{Client: c, Now: func() time.Time { return now }}
	ctx := context.Background()

	type step struct {
		name      string
		at        time.Duration
		phase     wavev1.GroupPhase
		gated     int32
		ready     bool
		changing  time.Duration
		wantWrite bool
		wantAgain time.Duration
		// wantReason, when set, is the Ready condition's reason after the step.
		wantReason string
	}
	steps := []step{
		{name: "first status", phase: wavev1.GroupPending, gated: 1, wantWrite: true},
		{name: "a count changes within the period", at: 100 * time.Millisecond, phase: wavev1.GroupPending, gated: 2, wantAgain: 900 * time.Millisecond},
		{name: "nothing changed", at: 200 * time.Millisecond, phase: wavev1.GroupPending, gated: 1},
		{name: "the phase changes within the period", at: 300 * time.Millisecond, phase: wavev1.GroupWaiting, gated: 3, wantWrite: true},
		{name: "a count changes within the new period", at: 800 * time.Millisecond, phase: wavev1.GroupWaiting, gated: 4, wantAgain: 500 * time.Millisecond},
		{name: "a count changes after the period", at: 1300 * time.Millisecond, phase: wavev1.GroupWaiting, gated: 4, wantWrite: true},
		{name: "the member becomes ready within the period", at: 1400 * time.Millisecond, phase: wavev1.GroupWaiting, gated: 4, ready: true, wantAgain: 900 * time.Millisecond},
		{name: "the group is released within the period", at: 1500 * time.Millisecond, phase: wavev1.GroupReleased, ready: true, wantWrite: true},
		{name: "the member is no longer ready, after the period", at: 2600 * time.Millisecond, phase: wavev1.GroupWaiting, gated: 4, wantWrite: true},
		{name: "and ready again after the period", at: 3700 * time.Millisecond, phase: wavev1.GroupWaiting, gated: 4, ready: true, wantWrite: true, wantReason: "Waiting"},
		{name: "members changing for less than settleReported", at: 5 * time.Second, phase: wavev1.GroupWaiting, gated: 4, ready: true,
			changing: settleReported - time.Millisecond, wantReason: "Waiting"},
		{name: "members changing for settleReported", at: 5100 * time.Millisecond, phase: wavev1.GroupWaiting, gated: 4, ready: true,
			changing: settleReported, wantWrite: true, wantReason: ReasonSettling},
		{name: "and longer", at: 5200 * time.Millisecond, phase: wavev1.GroupWaiting, gated: 4, ready: true,
			changing: 20 * time.Second, wantReason: ReasonSettling},
		{name: "settled", at: 5300 * time.Millisecond, phase: wavev1.GroupWaiting, gated: 4, ready: true, wantWrite: true, wantReason: "Waiting"},
	}
	for _, st := range steps {
		now = start.Add(st.at)
		prev := &wavev1.Sequence{}
		if err := c.Get(ctx, client.ObjectKey{Name: ObjectName("shop")}, prev); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		m := Member{Name: "web"}
		if st.ready {
			m.Ready = &readiness.Result{Status: readiness.Ready}
		}
		plan := []*Group{{Name: "web", Phase: st.phase, Members: []Member{m}}}
		u := &ungated{gated: map[string]int32{"web": st.gated}}
		before := writes
		again, err := r.writeStatus(ctx, "shop", plan, nil, u, &teardown.Result{}, nil, hold{Changing: st.changing, Settle: membershipSettle}, prev)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if st.wantReason != "" {
			cur := &wavev1.Sequence{}
			if err := c.Get(ctx, client.ObjectKey{Name: ObjectName("shop")}, cur); err != nil {
				t.Fatal(err)
			}
			if c := meta.FindStatusCondition(cur.Status.Conditions, "Ready"); c == nil || c.Reason != st.wantReason {
				t.Errorf("%s: Ready condition %+v, want reason %s", st.name, c, st.wantReason)
			}
		}
		got := struct {
			Write bool
			Again time.Duration
		}{writes > before, again}
		want := struct {
			Write bool
			Again time.Duration
		}{st.wantWrite, st.wantAgain}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, d)
		}
	}
}

// TestClearedTemplates: an open group's template stays cleared only while the sequence has pods of
// it; the templates a pass releases, and those of pods running without the gate, are cleared.
func TestClearedTemplates(t *testing.T) {
	for _, tc := range []struct {
		name                                string
		cleared, released, running, present []string
		want                                []string
	}{
		{name: "released now", released: []string{"rs-a/a"}, present: []string{"rs-a/a"}, want: []string{"rs-a/a"}},
		// The pass that released the first pods: the rest of them, gated, and the released, come.
		{name: "its ReplicaSet still creating pods", cleared: []string{"rs-a/a"}, released: []string{"rs-a/a"},
			running: []string{"rs-a/a"}, present: []string{"rs-a/a"}, want: []string{"rs-a/a"}},
		{name: "only gated pods of it so far", cleared: []string{"rs-a/a"}, present: []string{"rs-a/a"}, want: []string{"rs-a/a"}},
		{name: "its pods all gone", cleared: []string{"rs-a/a"}},
		{name: "rolled to a new template, the old ReplicaSet scaled to zero", cleared: []string{"rs-a/a"},
			released: []string{"rs-b/b"}, running: []string{"rs-b/b"}, present: []string{"rs-b/b"}, want: []string{"rs-b/b"}},
		{name: "the old template's last pod being deleted", cleared: []string{"rs-a/a", "rs-b/b"},
			running: []string{"rs-a/a", "rs-b/b"}, present: []string{"rs-a/a", "rs-b/b"}, want: []string{"rs-a/a", "rs-b/b"}},
		// Pods started before wavegate, or a status lost: their template is cleared by its pods.
		{name: "pods running without the gate, never cleared", running: []string{"sts/1"}, present: []string{"sts/1"}, want: []string{"sts/1"}},
		// An operator's pods: its object's UID alone stands for all of them.
		{name: "an operator's pods, some left", cleared: []string{"op"}, present: []string{"op"}, want: []string{"op"}},
		{name: "an operator's pods, none left", cleared: []string{"op"}, present: []string{"rs-a/a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, clearedTemplates(tc.cleared, tc.released, tc.running, tc.present)); d != "" {
				t.Errorf("cleared templates (-want +got):\n%s", d)
			}
		})
	}
}

// TestUngateKnowsTheTemplatesOfItsPods: a pass knows, per group, the templates of all the
// sequence's cached pods (gated or not, being deleted or not; a bare pod has none), and of those
// running without the gate.
func TestUngateKnowsTheTemplatesOfItsPods(t *testing.T) {
	running, deleting := gatedPod("running", "web", "a"), gatedPod("deleting", "web", "b")
	running.Spec.SchedulingGates, deleting.Spec.SchedulingGates = nil, nil
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	pods := []*corev1.Pod{running, deleting, gatedPod("gated", "web", "c"), gatedPod("bare", "web", ""), gatedPod("db", "db", "d")}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()}
	// Every group closed: nothing is released, nothing read.
	gate := newOpener(opens(map[string]bool{}), func() (openness, error) { return openness{}, errors.New("no read") })
	u, err := r.ungate(context.Background(), pods, gate, &freshView{r: r, seq: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string][]string{
		"templates": {"web": {"rs-a/a", "rs-b/b", "rs-c/c"}, "db": {"rs-d/d"}},
		"running":   {"web": {"rs-a/a", "rs-b/b"}},
	}
	if d := cmp.Diff(want, map[string]map[string][]string{"templates": u.templates, "running": u.running}); d != "" {
		t.Errorf("templates (-want +got):\n%s", d)
	}
}
