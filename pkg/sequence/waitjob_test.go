package sequence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/teardown"
	"wavegate.io/wavegate/pkg/waiter"
)

// TestCreateJobInTerminatingNamespace: a namespace being deleted takes no new wait Job, and that
// is not an error to retry (its groups are being torn down); any other refusal is.
func TestCreateJobInTerminatingNamespace(t *testing.T) {
	refuse := errors.New("quota exceeded")
	for _, tc := range []struct {
		name    string
		refusal func(client.Object) error
		wantErr bool
	}{
		{"terminating", func(o client.Object) error {
			return namespaceTerminating(schema.GroupResource{Group: "batch", Resource: "jobs"}, o)
		}, false},
		{"other refusal", func(client.Object) error { return refuse }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), interceptor.Funcs{
				Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
					if _, ok := obj.(*batchv1.Job); ok {
						return tc.refusal(obj)
					}
					return nil
				},
			})
			r := &Reconciler{Client: c, Image: "wavegate:test", Namespace: "wavegate-system"}
			g := &Group{Name: "web", JobName: "wavegate-wait-web-0123456789", JobNamespace: "shop"}
			if _, err := r.createJob(context.Background(), "shop", g, time.Time{}); (err != nil) != tc.wantErr {
				t.Errorf("createJob() = %v, want error: %v", err, tc.wantErr)
			}
		})
	}
}

// TestJobNamespace: a group's wait Job runs in its members' namespace when they share one, and in
// wavegate's own otherwise (cluster-scoped members, or a shared sequence's group across tenants):
// no tenant hosts the waiter that decides for another tenant's members.
func TestJobNamespace(t *testing.T) {
	m := func(ns string) Member { return Member{Namespace: ns} }
	for _, tc := range []struct {
		name    string
		members []Member
		want    string
	}{
		{"one namespace", []Member{m("shop"), m("shop")}, "shop"},
		{"cluster-scoped only", []Member{m("")}, "wavegate-system"},
		{"cluster-scoped and namespaced", []Member{m("shop"), m("")}, "wavegate-system"},
		{"two tenants", []Member{m("a"), m("b")}, "wavegate-system"},
	} {
		if got := jobNamespace(tc.members, "wavegate-system"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// listOnly is a cache that only lists, from a client.
type listOnly struct {
	cache.Cache
	r client.Reader
}

func (l listOnly) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return l.r.List(ctx, list, opts...)
}

// TestSucceededWaitersOnlyInTheJobsNamespace: a succeeded pod counts for its controller Job only in
// the Job's namespace: a pod someone made elsewhere, naming the Job's UID, releases nothing.
func TestSucceededWaitersOnlyInTheJobsNamespace(t *testing.T) {
	job := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "wait", Namespace: "wavegate-system", UID: "job-uid"}}
	pod := func(ns string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "wait-x", Namespace: ns,
				Labels:          map[string]string{keys.WaitJobLabel: "true", keys.WaitSequenceLabel: "platform"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "wait", UID: "job-uid", Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: corev1.PodSucceeded},
		}
	}
	for _, tc := range []struct {
		ns   string
		want bool
	}{{"wavegate-system", true}, {"tenant-a", false}} {
		c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(pod(tc.ns)).Build()
		r := &Reconciler{WaitPods: listOnly{r: c}}
		got, err := r.succeededWaiters(context.Background(), "platform", []batchv1.Job{job})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got["job-uid"]; ok != tc.want {
			t.Errorf("a succeeded pod in %s: counted %v, want %v", tc.ns, ok, tc.want)
		}
	}
}

// TestSucceededWaiterMarkedItsJob: a waiter marks its Job when it finds the group ready, and that
// mark counts at once, with the time it records: the pod's exit is reported only at the kubelet's
// next PLEG relist, up to a second later.
func TestSucceededWaiterMarkedItsJob(t *testing.T) {
	at := time.Date(2026, 11, 24, 8, 0, 0, 123456789, time.UTC)
	r := &Reconciler{Image: "wavegate:test", WaitPods: listOnly{r: fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()}}
	// A wait Job as the manager makes it, marked by a waiter that judged fingerprint.
	job := func(uid types.UID, rd wavev1.Readiness, mark, fingerprint string) batchv1.Job {
		j := r.waitJob("shop", &Group{Name: "db", JobNamespace: "shop", JobName: "wait-" + string(uid), Readiness: rd})
		j.UID = uid
		if mark != "" {
			j.Annotations[keys.WaiterReadyAnnotation] = mark
		}
		if fingerprint != "" {
			j.Annotations[keys.WaiterCheckedAnnotation] = fingerprint
		}
		return *j
	}
	fingerprint := func(rd wavev1.Readiness) string {
		a, ok := waiterArgs(ptr.To(job("x", rd, "", "")))
		if !ok {
			t.Fatal("the wait Job's arguments do not parse")
		}
		return a.Fingerprint()
	}
	strict := wavev1.Readiness{LoadBalancerIngress: true}
	jobs := []batchv1.Job{
		job("marked", wavev1.Readiness{}, at.Format(time.RFC3339Nano), fingerprint(wavev1.Readiness{})),
		job("running", wavev1.Readiness{}, "", ""),
		// Not a time: not what a waiter writes.
		job("garbage", wavev1.Readiness{}, "yes", fingerprint(wavev1.Readiness{})),
		// The Job was replaced under its name (its group's settings changed): the replaced Job's
		// waiter, still running a moment, marks the new one by the old settings.
		job("replaced", strict, at.Format(time.RFC3339Nano), fingerprint(wavev1.Readiness{})),
		// A mark without a fingerprint: not from a waiter of this Job's arguments.
		job("unsigned", wavev1.Readiness{}, at.Format(time.RFC3339Nano), ""),
	}
	got, err := r.succeededWaiters(context.Background(), "shop", jobs)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[types.UID]time.Time{"marked": at}, got); d != "" {
		t.Errorf("succeeded waiters (-want +got):\n%s", d)
	}
}

// TestWaitJobStartsAtOnceWhenItsAccountExists: a wait Job starts at once in a namespace that has
// the waiter's ServiceAccount (its pod would be refused without one), and is created suspended,
// for the waiter-RBAC controller to resume, where it has none yet (or only one wavegate did not
// make).
func TestWaitJobStartsAtOnceWhenItsAccountExists(t *testing.T) {
	account := func(ns string, labels map[string]string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: WaiterServiceAccount, Namespace: ns, Labels: labels}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		account("ready", map[string]string{keys.WaiterRBACLabel: "true"}), account("foreign", nil)).Build()
	r := &Reconciler{Client: c, Image: "wavegate:test", Namespace: "wavegate-system"}
	for ns, suspended := range map[string]bool{"ready": false, "fresh": true, "foreign": true} {
		g := &Group{Name: "web", JobName: "wavegate-wait-web-0123456789", JobNamespace: ns}
		j, err := r.createJob(context.Background(), "shop", g, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ptr.Deref(j.Spec.Suspend, false); got != suspended {
			t.Errorf("wait Job in %s: suspended = %v, want %v", ns, got, suspended)
		}
		if j.Spec.ActiveDeadlineSeconds != nil {
			t.Errorf("wait Job in %s created armed: %d", ns, *j.Spec.ActiveDeadlineSeconds)
		}
	}
}

// TestJustCreatedJobArmedByAPassThatReads: the pass that creates a group's wait Job does not make
// the consistent read only to arm it: that would hold up the next pass, which releases the group's
// first pods. The Job is armed by the first pass that reads anyway, or after armingGrace; a
// manager that did not create it (a restart) arms it at once.
func TestJustCreatedJobArmedByAPassThatReads(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: WaiterServiceAccount, Namespace: "shop", Labels: map[string]string{keys.WaiterRBACLabel: "true"}}}).Build()
	now := time.Now()
	r := &Reconciler{Client: c, Tracker: &members.Tracker{}, Image: "wavegate:test", Namespace: "wavegate-system", Now: func() time.Time { return now }}
	members := []Member{m("db", 1, "shop", "db", 1)}
	td := &teardown.Result{}
	reads := 0
	pass := func(read bool) (time.Duration, *batchv1.Job) {
		t.Helper()
		var jobs batchv1.JobList
		if err := c.List(ctx, &jobs); err != nil {
			t.Fatal(err)
		}
		states := jobStates(jobs.Items, nil)
		plan := Plan("shop", members, nil, states, "wavegate-system")
		gate := newOpener(openGroups(plan), func() (openness, error) { reads++; return openGroups(plan), nil })
		if read {
			if _, err := gate.Open("db"); err != nil { // the pass released pods
				t.Fatal(err)
			}
		}
		later, _, err := r.openJobs(ctx, r.Tracker.Generation(), "shop", plan, jobs.Items, nil, gate, td)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.List(ctx, &jobs); err != nil || len(jobs.Items) != 1 {
			t.Fatalf("wait Jobs: %v, %v", jobs.Items, err)
		}
		return later, &jobs.Items[0]
	}
	later, j := pass(false)
	if j.Spec.ActiveDeadlineSeconds != nil || reads != 0 || later != armingGrace {
		t.Fatalf("creating pass: deadline %v, %d reads, back in %s; want unarmed, no read, back in %s", j.Spec.ActiveDeadlineSeconds, reads, later, armingGrace)
	}
	now = now.Add(armingGrace / 2)
	if later, j = pass(false); j.Spec.ActiveDeadlineSeconds != nil || reads != 0 || later != armingGrace/2 {
		t.Fatalf("a pass that does not read: deadline %v, %d reads, back in %s", j.Spec.ActiveDeadlineSeconds, reads, later)
	}
	if later, j = pass(true); j.Spec.ActiveDeadlineSeconds == nil || reads != 1 || later != 0 {
		t.Fatalf("a pass that reads: deadline %v, %d reads, back in %s; want armed", j.Spec.ActiveDeadlineSeconds, reads, later)
	}

	// Past the grace, and after a restart, a pass reads to arm.
	for name, restart := range map[string]func(){
		"grace over": func() { now = now.Add(armingGrace) },
		"restart": func() {
			r = &Reconciler{Client: c, Tracker: r.Tracker, Image: r.Image, Namespace: r.Namespace, Now: r.Now}
		},
	} {
		if err := c.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace("shop")); err != nil {
			t.Fatal(err)
		}
		pass(false)
		restart()
		reads = 0
		if later, j = pass(false); j.Spec.ActiveDeadlineSeconds == nil || reads != 1 || later != 0 {
			t.Errorf("%s: deadline %v, %d reads, back in %s; want armed", name, j.Spec.ActiveDeadlineSeconds, reads, later)
		}
	}
}

// TestWaitJobNamesThePlannedObjects: a wait Job tells its waiter which object of each member the
// group was planned with (UID and generation), so that a view from a lagging API server cache (an
// older generation, or the object a recreated member replaced) does not count as ready.
func TestWaitJobNamesThePlannedObjects(t *testing.T) {
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	r := &Reconciler{Image: "wavegate:test"}
	g := &Group{Name: "web", JobName: "wavegate-wait-web-0123456789", JobNamespace: "shop",
		Members: []Member{{GVR: deployments, Namespace: "shop", Name: "web", UID: "u1", Generation: 3}}}
	job := r.waitJob("shop", g)
	args, err := waiter.ParseArgs(job.Spec.Template.Spec.Containers[0].Args)
	if err != nil {
		t.Fatal(err)
	}
	want := []waiter.Member{{GVR: deployments, Namespace: "shop", Name: "web", UID: "u1", Generation: 3}}
	if d := cmp.Diff(want, args.Members); d != "" {
		t.Errorf("the waiter's members (-want +got):\n%s", d)
	}
	if args.Job != "shop/"+g.JobName {
		t.Errorf("the waiter marks Job %q, want its own, shop/%s", args.Job, g.JobName)
	}
}

// TestJobsCreatedAndArmedSideBySide: a pass that opens a group arms its Job and creates the next
// group's Job at the same time. Each call here waits for the other to have started (for at most
// 2 s): made one after the other, in either order, the first one fails.
func TestJobsCreatedAndArmedSideBySide(t *testing.T) {
	ctx := context.Background()
	ms := []Member{m("db", 1, "shop", "db", 1), m("web", 2, "shop", "web", 1)}
	dbJob := (&Reconciler{Image: "wavegate:test"}).waitJob("shop", Plan("shop", ms, nil, func(*Group) JobState { return JobMissing }, "wavegate-system")[0])
	dbJob.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Minute))
	created, armed := make(chan struct{}), make(chan struct{})
	meet := func(mine, other chan struct{}, what string) error {
		close(mine)
		select {
		case <-other:
			return nil
		case <-time.After(2 * time.Second):
			return errors.New(what + " waited 2s for the other call: the calls are made one after the other")
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(dbJob,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: WaiterServiceAccount, Namespace: "shop", Labels: map[string]string{keys.WaiterRBACLabel: "true"}}}).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
				if _, ok := o.(*batchv1.Job); ok {
					if err := meet(created, armed, "creating the next group's Job"); err != nil {
						return err
					}
				}
				return c.Create(ctx, o, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
				if _, ok := o.(*batchv1.Job); ok {
					if err := meet(armed, created, "arming the open group's Job"); err != nil {
						return err
					}
				}
				return c.Patch(ctx, o, p, opts...)
			},
		}).Build()
	r := &Reconciler{Client: c, Tracker: &members.Tracker{}, Image: "wavegate:test", Namespace: "wavegate-system"}
	var jobs batchv1.JobList
	if err := c.List(ctx, &jobs); err != nil {
		t.Fatal(err)
	}
	plan := Plan("shop", ms, nil, jobStates(jobs.Items, nil), "wavegate-system")
	if !plan[0].Open || plan[0].JobState != JobRunning || !plan[1].Prestart {
		t.Fatalf("plan: %+v, %+v; want db open with its Job running, web prestarted", plan[0], plan[1])
	}
	gate := newOpener(openGroups(plan), func() (openness, error) { return openGroups(plan), nil })
	if _, _, err := r.openJobs(ctx, r.Tracker.Generation(), "shop", plan, jobs.Items, nil, gate, &teardown.Result{}); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &jobs); err != nil {
		t.Fatal(err)
	}
	armedJobs := map[string]bool{}
	for _, j := range jobs.Items {
		armedJobs[j.Labels[keys.WaitGroupLabel]] = j.Spec.ActiveDeadlineSeconds != nil
	}
	if d := cmp.Diff(map[string]bool{"db": true, "web": false}, armedJobs); d != "" {
		t.Errorf("wait Jobs armed (-want +got):\n%s", d)
	}
}

// TestStateOf: a wait Job's failure reason tells a member that failed for good (the waiter's exit
// code, through the Job's pod failure policy) from a timeout (the Job's deadline) and from a waiter
// that kept failing (the backoff limit); a Job made before wait Jobs had a pod failure policy failed
// at its waiter's first failure, of a member as its log says.
func TestStateOf(t *testing.T) {
	r := &Reconciler{Image: "wavegate:test"}
	current := r.waitJob("shop", &Group{Name: "db", JobName: "wavegate-wait-db-0123456789", JobNamespace: "shop"})
	legacy := current.DeepCopy()
	legacy.Spec.PodFailurePolicy, legacy.Spec.BackoffLimit = nil, ptr.To[int32](0)
	cond := func(typ batchv1.JobConditionType, status corev1.ConditionStatus, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: status, Reason: reason}
	}
	failed := func(reason string) []batchv1.JobCondition {
		return []batchv1.JobCondition{cond(batchv1.JobFailureTarget, corev1.ConditionTrue, reason), cond(batchv1.JobFailed, corev1.ConditionTrue, reason)}
	}
	for _, tc := range []struct {
		name  string
		job   *batchv1.Job
		conds []batchv1.JobCondition
		want  JobState
	}{
		{"running", current, nil, JobRunning},
		{"only the failure target so far", current, failed(batchv1.JobReasonPodFailurePolicy)[:1], JobRunning},
		{"a Failed condition that is not true", current, []batchv1.JobCondition{cond(batchv1.JobFailed, corev1.ConditionFalse, batchv1.JobReasonPodFailurePolicy)}, JobRunning},
		{"complete", current, []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, batchv1.JobReasonCompletionsReached),
			cond(batchv1.JobComplete, corev1.ConditionTrue, batchv1.JobReasonCompletionsReached)}, JobComplete},
		{"a member failed: the waiter's exit code", current, failed(batchv1.JobReasonPodFailurePolicy), JobFailed},
		{"timed out", current, failed(batchv1.JobReasonDeadlineExceeded), JobTimedOut},
		{"the waiter kept failing", current, failed(batchv1.JobReasonBackoffLimitExceeded), JobWaiterFailed},
		{"failed for a reason wavegate does not know", current, failed("SomethingNew"), JobWaiterFailed},
		{"a Job without a failure policy, failed", legacy, failed(batchv1.JobReasonBackoffLimitExceeded), JobFailed},
		{"a Job without a failure policy, timed out", legacy, failed(batchv1.JobReasonDeadlineExceeded), JobTimedOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := tc.job.DeepCopy()
			j.Status.Conditions = tc.conds
			if got := StateOf(j); got != tc.want {
				t.Errorf("StateOf = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestWaiterSuccessOutlivesTheDeadline: a waiter that finds its group ready just before the
// group's timeout marks its Job and exits 0, but the Job controller, hearing of the exit a second
// or two later, checks the deadline first and fails the Job with DeadlineExceeded. The group was
// ready: it stays complete (released), and the groups after it open. Only a member that failed for
// good (the waiter's exit code) fails the group, and no waiter succeeds then.
func TestWaiterSuccessOutlivesTheDeadline(t *testing.T) {
	running := func() batchv1.Job {
		j := (&Reconciler{Image: "wavegate:test"}).waitJob("shop", &Group{Name: "running", JobNamespace: "shop", JobName: "running"})
		j.UID = "running"
		return *j
	}
	failed := func(uid types.UID, reason string) batchv1.Job {
		return batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "shop", UID: uid},
			Spec: batchv1.JobSpec{PodFailurePolicy: &batchv1.PodFailurePolicy{}},
			Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason}}}}
	}
	jobs := []batchv1.Job{
		failed("ready-then-deadline", batchv1.JobReasonDeadlineExceeded),
		failed("deadline", batchv1.JobReasonDeadlineExceeded),
		failed("ready-then-backoff", batchv1.JobReasonBackoffLimitExceeded),
		failed("member-failed", batchv1.JobReasonPodFailurePolicy),
		running(),
	}
	at := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	succeeded := map[types.UID]time.Time{"ready-then-deadline": at, "ready-then-backoff": at, "member-failed": at, "running": at}
	states := jobStates(jobs, succeeded)
	got := map[string]JobState{}
	for _, j := range jobs {
		got[j.Name] = states(&Group{Name: j.Name, JobNamespace: "shop", JobName: j.Name})
	}
	want := map[string]JobState{"ready-then-deadline": JobComplete, "deadline": JobTimedOut, "ready-then-backoff": JobComplete,
		"member-failed": JobFailed, "running": JobComplete}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("job states (-want +got):\n%s", d)
	}
}

// TestWaitJobRetriesItsWaiter: a wait Job fails at once when its waiter finds a member that failed
// for good (its exit code), never for a disrupted pod (evicted, preempted, drained), and only after
// a few other failures (an error, a crash, an OOM kill); its pod is not BestEffort.
func TestWaitJobRetriesItsWaiter(t *testing.T) {
	r := &Reconciler{Image: "wavegate:test"}
	job := r.waitJob("shop", &Group{Name: "db", JobName: "wavegate-wait-db-0123456789", JobNamespace: "shop"})
	type spec struct {
		BackoffLimit     *int32
		PodFailurePolicy *batchv1.PodFailurePolicy
		RestartPolicy    corev1.RestartPolicy
		Containers       []string
		Requests         corev1.ResourceList
	}
	pod := job.Spec.Template.Spec
	got := spec{BackoffLimit: job.Spec.BackoffLimit, PodFailurePolicy: job.Spec.PodFailurePolicy, RestartPolicy: pod.RestartPolicy,
		Requests: pod.Containers[0].Resources.Requests}
	for _, c := range pod.Containers {
		got.Containers = append(got.Containers, c.Name)
	}
	want := spec{
		BackoffLimit: ptr.To[int32](6),
		PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
			{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				ContainerName: ptr.To("wait"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{3}}},
			{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
				{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
		}},
		// A pod failure policy requires it.
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []string{"wait"},
		Requests:      corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the wait Job's failure handling (-want +got):\n%s", d)
	}
	if waiter.ExitFailed != 3 {
		t.Errorf("the waiter exits %d for a member that failed: the FailJob rule must name it", waiter.ExitFailed)
	}
}

// TestWaiterOfOtherReadinessIsReplaced: a running wait Job whose waiter judges by other readiness
// settings than its group has now (its policy changed while the group waited) is deleted, for the
// next pass to start one with the group's settings. A waiter that succeeded already (its own mark,
// or its pod's exit) and a Job the Job controller completed stand: a released group stays
// released when its policy changes.
func TestWaiterOfOtherReadinessIsReplaced(t *testing.T) {
	at := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	strict := wavev1.Readiness{LoadBalancerIngress: true}
	group := func(name string, rd wavev1.Readiness, nsRd map[string]wavev1.Readiness) *Group {
		return &Group{Name: name, Open: true, JobNamespace: "shop", JobName: "wavegate-wait-" + name, Readiness: rd, NamespaceReadiness: nsRd}
	}
	r := &Reconciler{Image: "wavegate:test"}
	job := func(g *Group, complete bool) batchv1.Job {
		j := r.waitJob("shop", g)
		j.UID = types.UID(g.Name)
		j.Spec.ActiveDeadlineSeconds = ptr.To[int64](600)
		if complete {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		}
		return *j
	}
	// The plan now, and the Jobs made for each group before its policy changed (or not).
	plan := []*Group{
		group("same", strict, nil),
		group("stricter", strict, nil),
		group("namespace", wavev1.Readiness{}, map[string]wavev1.Readiness{"b": strict}),
		group("succeeded", strict, nil),
		group("released", strict, nil),
	}
	jobs := []batchv1.Job{
		job(group("same", strict, nil), false),
		job(group("stricter", wavev1.Readiness{}, nil), false),
		job(group("namespace", wavev1.Readiness{}, nil), false),
		job(group("succeeded", wavev1.Readiness{}, nil), false),
		job(group("released", wavev1.Readiness{}, nil), true),
	}
	// The waiter of "succeeded" succeeded before the policy changed.
	states := jobStates(jobs, map[types.UID]time.Time{"succeeded": at})
	got := map[string]JobState{}
	for _, g := range plan {
		g.JobState = states(g)
		got[g.Name] = g.JobState
	}
	want := map[string]JobState{"same": JobRunning, "stricter": JobRunning, "namespace": JobRunning, "succeeded": JobComplete, "released": JobComplete}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("job states (-want +got):\n%s", d)
	}

	objs := make([]client.Object, len(jobs))
	for i := range jobs {
		objs[i] = &jobs[i]
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).Build()
	r.Client, r.Tracker = c, &members.Tracker{}
	if err := r.deleteStaleJobs(context.Background(), r.Tracker.Generation(), plan, jobs); err != nil {
		t.Fatal(err)
	}
	var left batchv1.JobList
	if err := c.List(context.Background(), &left); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range left.Items {
		names = append(names, j.Name)
	}
	if d := cmp.Diff([]string{"wavegate-wait-released", "wavegate-wait-same", "wavegate-wait-succeeded"}, names); d != "" {
		t.Errorf("wait Jobs left (-want +got):\n%s", d)
	}
}

// TestRearmWhenTheTimeoutChanges: an armed wait Job whose group's timeout changed while it waited
// (its policy was edited) gets the new timeout, still counted from when the group opened; nothing
// else is re-armed.
func TestRearmWhenTheTimeoutChanges(t *testing.T) {
	created := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	opened := created.Add(30*time.Second + 250*time.Millisecond)
	armed := func(deadline int64, annotated bool) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "wj", Namespace: "shop", CreationTimestamp: metav1.NewTime(created),
			Annotations: map[string]string{}}, Spec: batchv1.JobSpec{ActiveDeadlineSeconds: ptr.To(deadline)}}
		if annotated {
			j.Annotations[keys.WaitOpenedAnnotation] = opened.Format(time.RFC3339Nano)
		}
		return j
	}
	open := func(timeout time.Duration) *Group {
		return &Group{Name: "db", Open: true, JobState: JobRunning, Timeout: timeout}
	}
	// Armed when the group opened, with a 10-minute timeout: 631 s from the Job's creation.
	asArmed := armDeadline(created, opened, 10*time.Minute)
	if asArmed != 631 {
		t.Fatalf("armDeadline = %d, want 631", asArmed)
	}
	for name, tc := range map[string]struct {
		job    *batchv1.Job
		group  *Group
		want   int64
		rearms bool
	}{
		"unchanged":                       {armed(asArmed, true), open(10 * time.Minute), 0, false},
		"shorter":                         {armed(asArmed, true), open(time.Minute), 91, true},
		"longer":                          {armed(asArmed, true), open(time.Hour), 3631, true},
		"armed before opened-at was kept": {armed(asArmed, false), open(time.Minute), 0, false},
		"not open":                        {armed(asArmed, true), &Group{Name: "db", JobState: JobRunning, Timeout: time.Minute}, 0, false},
		"complete":                        {armed(asArmed, true), &Group{Name: "db", Open: true, JobState: JobComplete, Timeout: time.Minute}, 0, false},
		"not armed":                       {&batchv1.Job{}, open(time.Minute), 0, false},
		"no Job":                          {nil, open(time.Minute), 0, false},
	} {
		d, ok := rearmDeadline(tc.job, tc.group)
		if ok != tc.rearms || ok && d != tc.want {
			t.Errorf("%s: rearmDeadline = %d, %v; want %d, %v", name, d, ok, tc.want, tc.rearms)
		}
	}
}

// TestArmRecordsWhenTheGroupOpened: arming sets the deadline and records when, also on a Job that
// has no annotations (a JSON patch cannot add a key to a map that is not there).
func TestArmRecordsWhenTheGroupOpened(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 0, 30, 0, time.UTC)
	for name, annotations := range map[string]map[string]string{"annotated": {"a": "b"}, "without annotations": nil} {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "wj", Namespace: "shop", Annotations: annotations,
			CreationTimestamp: metav1.NewTime(now.Add(-30 * time.Second))}}
		c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(j).Build()
		r := &Reconciler{Client: c, Now: func() time.Time { return now }}
		if err := r.armJob(context.Background(), j.DeepCopy(), &Group{Name: "db", Timeout: time.Minute}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := &batchv1.Job{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(j), got); err != nil {
			t.Fatal(err)
		}
		if d := ptr.Deref(got.Spec.ActiveDeadlineSeconds, 0); d != 90 {
			t.Errorf("%s: activeDeadlineSeconds = %d, want 90", name, d)
		}
		if at := got.Annotations[keys.WaitOpenedAnnotation]; at != now.Format(time.RFC3339Nano) {
			t.Errorf("%s: %s = %q, want %s", name, keys.WaitOpenedAnnotation, at, now.Format(time.RFC3339Nano))
		}
	}
}

// TestJobsAreLeftAloneOnAMovedView: a pass that read the members before the tracker began to
// re-list (a namespace opting in anywhere re-lists every informer) may have planned on a partial
// view, with the groups whose members it missed gone from its plan. On it no wait Job is created
// or armed, and none is deleted as stale: not the Complete one of a released group whose members
// the view missed (the group would wait again, and the new pods of the groups after it). On the
// view the pass read, the same calls create the open group's Job and delete the one no group
// needs (the test can fail).
func TestJobsAreLeftAloneOnAMovedView(t *testing.T) {
	r := &Reconciler{Image: "wavegate:test", Namespace: "wavegate-system"}
	released := r.waitJob("shop", &Group{Name: "cache", Open: true, JobNamespace: "shop", JobName: "wavegate-wait-cache"})
	released.UID = "cache"
	released.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	// The plan of the partial view: db open without a Job, cache's members missed.
	plan := Plan("shop", []Member{m("db", 1, "shop", "db", 1)}, nil, func(*Group) JobState { return JobMissing }, "wavegate-system")
	for _, moved := range []bool{true, false} {
		c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(released.DeepCopy()).Build()
		r.Client, r.Tracker = c, &members.Tracker{}
		view := r.Tracker.Generation()
		if moved {
			r.Tracker.Rescope()
		}
		ctx := context.Background()
		gate := newOpener(openGroups(plan), func() (openness, error) { return openGroups(plan), nil })
		_, _, openErr := r.openJobs(ctx, view, "shop", plan, []batchv1.Job{*released}, nil, gate, &teardown.Result{})
		deleteErr := r.deleteStaleJobs(ctx, view, plan, []batchv1.Job{*released})
		var left batchv1.JobList
		if err := c.List(ctx, &left); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, j := range left.Items {
			names = append(names, j.Labels[keys.WaitGroupLabel])
		}
		want, wantErr := []string{"db"}, error(nil)
		if moved {
			want, wantErr = []string{"cache"}, errViewChanged
		}
		if !errors.Is(openErr, wantErr) || !errors.Is(deleteErr, wantErr) {
			t.Errorf("view moved %v: errors %v and %v, want %v", moved, openErr, deleteErr, wantErr)
		}
		if d := cmp.Diff(want, names); d != "" {
			t.Errorf("view moved %v: wait Jobs of the groups (-want +got):\n%s", moved, d)
		}
	}
}
