package sequence

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/teardown"
)

// TestChurningGroupTimesOut: a group that stays open while its member's generation keeps changing
// (two controllers fighting over its spec, an autoscaler resizing a workload that never becomes
// available) gets a new revision, and a new wait Job, every minute; its timeout still counts from
// when the group opened, so it times out and the groups after it do not wait for good. A revision
// after the group timed out, or after it was released, gets the whole timeout again (a fix, an
// upgrade). The passes are the controller's own steps (Plan, openJobs, deleteStaleJobs) on a fake
// client and clock.
func TestChurningGroupTimesOut(t *testing.T) {
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithStatusSubresource(&batchv1.Job{}).WithObjects(
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: WaiterServiceAccount, Namespace: "shop", Labels: map[string]string{keys.WaiterRBACLabel: "true"}}},
	).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			o.SetCreationTimestamp(metav1.NewTime(now))
			return cl.Create(ctx, o, opts...)
		}}).Build()
	r := &Reconciler{Client: c, Tracker: &members.Tracker{}, Image: "wavegate:test", Namespace: "wavegate-system", Now: func() time.Time { return now }}
	gen := int64(0)
	// pass runs one pass, on a new revision of db when bump, with the pass's consistent read opening
	// db when read (else its new Job waits unarmed, as under a settle), and with an earlier group
	// schema that is not released when earlier (db is closed). It returns db's wait Job and when it
	// times out (zero: not armed).
	pass := func(bump, read, earlier bool) (*batchv1.Job, time.Time) {
		t.Helper()
		if bump {
			gen++
		}
		var jobs batchv1.JobList
		if err := c.List(ctx, &jobs); err != nil {
			t.Fatal(err)
		}
		ms := []Member{m("db", 1, "shop", "db", gen), m("web", 2, "shop", "web", 1)}
		if earlier {
			ms = append(ms, m("schema", 0, "shop", "schema", 1))
		}
		plan := Plan("shop", ms, nil, jobStates(jobs.Items, nil), "wavegate-system")
		gate := newOpener(openGroups(plan), func() (openness, error) { return openGroups(plan), nil })
		if read {
			if _, err := gate.Open("db"); err != nil { // the pass's consistent read, as when it releases pods
				t.Fatal(err)
			}
		}
		if _, _, err := r.openJobs(ctx, r.Tracker.Generation(), "shop", plan, jobs.Items, nil, gate, &teardown.Result{}); err != nil {
			t.Fatal(err)
		}
		if err := r.deleteStaleJobs(ctx, r.Tracker.Generation(), plan, jobs.Items); err != nil {
			t.Fatal(err)
		}
		var db *Group
		for _, g := range plan {
			if g.Name == "db" {
				db = g
			}
		}
		j := &batchv1.Job{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: db.JobName}, j); err != nil {
			t.Fatal(err)
		}
		if _, ok := j.Annotations[keys.ArgoCDSyncWaveAnnotation]; !ok {
			t.Fatalf("db's wait Job %s lost its sync wave: annotations %v", j.Name, j.Annotations)
		}
		if j.Spec.ActiveDeadlineSeconds == nil {
			return j, time.Time{}
		}
		return j, j.CreationTimestamp.Add(time.Duration(*j.Spec.ActiveDeadlineSeconds) * time.Second)
	}
	opened := now
	var j *batchv1.Job
	for i := range 15 { // 15 minutes, one revision a minute, against a 10 minute timeout
		// Every other revision comes under a settle: its Job is made, and armed only by the next
		// pass, which already sees the revision after it.
		read := i%2 == 0
		var deadline time.Time
		j, deadline = pass(true, read, false)
		if !read {
			if !deadline.IsZero() {
				t.Fatalf("db's wait Job %s was armed without the read", j.Name)
			}
			now = now.Add(time.Minute)
			continue
		}
		want := opened.Add(policy.DefaultTimeout)
		if now.After(want) {
			want = now // past it: at once (the shortest deadline, a second)
		}
		if d := deadline.Sub(want); d > time.Second || d < -time.Second {
			t.Fatalf("at +%s, db's wait Job %s times out at +%s from the group's opening, want +%s (its timeout, or at once past it)",
				now.Sub(opened), j.Name, deadline.Sub(opened), want.Sub(opened))
		}
		now = now.Add(time.Minute)
	}

	for _, end := range []batchv1.JobConditionType{batchv1.JobFailed, batchv1.JobComplete} {
		// The Job controller ends the Job (DeadlineExceeded, or the waiter found db ready).
		j.Status.Conditions = []batchv1.JobCondition{{Type: end, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded}}
		if end == batchv1.JobComplete {
			j.Status.Conditions[0].Reason = ""
		}
		if err := c.Status().Update(ctx, j); err != nil {
			t.Fatal(err)
		}
		var deadline time.Time
		j, deadline = pass(true, true, false)
		if want := now.Add(policy.DefaultTimeout); deadline.Before(want) {
			t.Errorf("after db's Job %s, its next revision's Job times out at +%s from its creation, want its whole timeout %s",
				end, deadline.Sub(now), policy.DefaultTimeout)
		}
		now = now.Add(time.Minute)
	}

	// db waits open again (a revision of the last armed, running Job's), then closes behind a new
	// earlier group for 20 minutes before its next Job is armed: it reopens with its whole timeout.
	now = now.Add(time.Minute)
	if _, deadline := pass(true, false, false); !deadline.IsZero() {
		t.Fatal("armed without the read")
	}
	pass(false, false, true)
	now = now.Add(20 * time.Minute)
	j, deadline := pass(false, true, false)
	if want := now.Add(policy.DefaultTimeout); deadline.Before(want) {
		t.Errorf("db reopened after 20 minutes closed, and its wait Job %s times out %s after its reopening, want its whole timeout %s",
			j.Name, deadline.Sub(now), policy.DefaultTimeout)
	}
}

// TestWaitingSince: only an armed, running, unmarked wait Job of an earlier revision of the same
// group and sequence, in the namespace where the new Job runs and with a waiter of that group,
// carries the group's opening; the earliest of them counts.
func TestWaitingSince(t *testing.T) {
	r := &Reconciler{Image: "wavegate:test", Namespace: "wavegate-system"}
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	plan := Plan("shop", []Member{m("db", 1, "shop", "db", 1)}, nil, func(*Group) JobState { return JobMissing }, "wavegate-system")
	g := plan[0]
	old := func(gen int64, opened time.Time, edit func(j *batchv1.Job)) batchv1.Job {
		p := Plan("shop", []Member{m("db", 1, "shop", "db", gen)}, nil, func(*Group) JobState { return JobMissing }, "wavegate-system")
		j := r.waitJob("shop", p[0])
		j.Spec.ActiveDeadlineSeconds = new(int64(600))
		j.Annotations = map[string]string{keys.WaitOpenedAnnotation: opened.Format(time.RFC3339Nano)}
		if edit != nil {
			edit(j)
		}
		return *j
	}
	for _, tc := range []struct {
		name string
		jobs []batchv1.Job
		want time.Time
	}{
		{name: "the earliest of two earlier revisions", want: t0,
			jobs: []batchv1.Job{old(2, t0.Add(time.Minute), nil), old(3, t0, nil)}},
		{name: "its own Job", jobs: []batchv1.Job{old(1, t0, nil)}},
		{name: "unarmed", jobs: []batchv1.Job{old(2, t0, func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = nil })}},
		{name: "its waiter found the group ready (a mark of its own arguments)", jobs: []batchv1.Job{old(2, t0, func(j *batchv1.Job) { j.UID = "marked" })}},
		{name: "timed out", jobs: []batchv1.Job{old(2, t0, func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded}}
		})}},
		{name: "in another namespace (another tenant's, naming this sequence)", jobs: []batchv1.Job{old(2, t0, func(j *batchv1.Job) { j.Namespace = "other" })}},
		{name: "another group's labels", jobs: []batchv1.Job{old(2, t0, func(j *batchv1.Job) { j.Labels[keys.WaitGroupLabel] = "web" })}},
		{name: "no waiter of the group", jobs: []batchv1.Job{old(2, t0, func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Args = nil })}},
		{name: "its waiter's pod exited 0", jobs: []batchv1.Job{old(2, t0, func(j *batchv1.Job) { j.UID = "exited" })}},
		{name: "not armed yet, made with the group's opening", want: t0, jobs: []batchv1.Job{old(2, t0.Add(time.Minute), func(j *batchv1.Job) {
			j.Spec.ActiveDeadlineSeconds = nil
			j.Annotations = map[string]string{keys.WaitingSinceAnnotation: t0.Format(time.RFC3339Nano)}
		})}},
		{name: "disarmed (its group closed again)", jobs: []batchv1.Job{old(2, t0, func(j *batchv1.Job) {
			j.Spec.ActiveDeadlineSeconds = nil
			j.Annotations[keys.WaitingSinceAnnotation] = t0.Format(time.RFC3339Nano)
		})}},
		{name: "not armed, being deleted", jobs: []batchv1.Job{old(2, t0, func(j *batchv1.Job) {
			j.Spec.ActiveDeadlineSeconds = nil
			j.Annotations = map[string]string{keys.WaitingSinceAnnotation: t0.Format(time.RFC3339Nano)}
			j.DeletionTimestamp = &metav1.Time{Time: t0}
		})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := waitingSince(tc.jobs, map[types.UID]time.Time{"exited": t0, "marked": t0}, "shop", g); !got.Equal(tc.want) {
				t.Errorf("waitingSince = %v, want %v", got, tc.want)
			}
		})
	}
}
