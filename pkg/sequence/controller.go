package sequence

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/metrics"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/readiness"
	"wavegate.io/wavegate/pkg/resolve"
	"wavegate.io/wavegate/pkg/teardown"
)

const (
	// PodSequenceIndex indexes cached pods by sequence.
	PodSequenceIndex = keys.PodSequenceIndex
	// WaiterServiceAccount runs wait Jobs. The waiters' Roles and RoleBindings have its name, and
	// so do the ClusterRole and ClusterRoleBinding of cluster-scoped members, which only the waiter
	// of wavegate's own namespace is bound to.
	WaiterServiceAccount = "wavegate-waiter"
	// WaiterStorageClassesRole is the ClusterRole, and its ClusterRoleBinding, that let the waiters
	// of claims, in any namespace, read StorageClasses: the one cluster-wide read a tenant's waiter
	// gets.
	WaiterStorageClassesRole = "wavegate-waiter-storageclasses"
)

// Event reasons.
const (
	ReasonWaitingForGroup = "WaitingForGroup"
	ReasonGroupReleased   = "GroupReleased"
	ReasonGroupTimedOut   = "GroupTimedOut"
	ReasonGroupFailed     = "GroupFailed"
	ReasonUngated         = "Ungated"
	// ReasonWaitJobRefused: the API server refused a group's wait Job (another admission webhook or
	// policy, a ResourceQuota), so the group cannot open.
	ReasonWaitJobRefused = "WaitJobRefused"
)

// ReasonSettling is the Sequence's Ready condition's reason while members that keep changing hold
// its groups closed (see MembershipSettleMax).
const ReasonSettling = "Settling"

// +kubebuilder:rbac:groups=wavegate.io,resources=sequences,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=wavegate.io,resources=sequences/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler orders the creation of one sequence per reconcile; the request name is the sequence.
type Reconciler struct {
	Client   client.Client
	Tracker  *members.Tracker
	Policies interface{ Index() *policy.Index }
	Recorder events.EventRecorder
	// Image is the wavegate image that wait Jobs run.
	Image string
	// Namespace is wavegate's namespace: wait Jobs of groups without namespaced members run there.
	Namespace string
	// Now is the clock (tests may replace it).
	Now func() time.Time
	// APIReader reads straight from the API server: a pod whose gate is not where the cache saw it
	// (nil: the gate removal fails, and a later pass retries it).
	APIReader client.Reader
	// Cleared hears of the templates a pass released the moment it decides (admission's store on
	// this replica); nil: admission hears of them from the Sequence's status only.
	Cleared interface {
		Clear(sequence string, released map[string][]string)
	}
	// WaitPods reads wait Jobs' pods (a cache of pods labeled keys.WaitJobLabel); nil releases on
	// the Jobs' Complete condition only.
	WaitPods cache.Cache
	// SettleMax bounds how long members that keep changing hold their sequence's groups closed
	// (0: MembershipSettleMax).
	SettleMax time.Duration

	policiesChanged func()
	policiesPending atomic.Bool

	recent       recentReleases
	created      recentCreations
	statusWrites statusWrites
	emitted      emittedEvents
	settling     settling
	refusals     refusals
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	seq := req.Name
	log := ctrl.LoggerFrom(ctx).WithValues("sequence", seq)
	ctx = ctrl.LoggerInto(ctx, log)
	// What the tracker shows now: the pass decides on it only while it stays so (a re-list, a kind
	// failing meanwhile, may leave the members it reads partial), and its consistent reads leave out
	// only the kinds unavailable now. Read before the tracker is asked whether it has synced: a
	// re-list that begins in between moves the generation past it.
	view, unavailable := r.Tracker.Generation(), r.Tracker.Unavailable()
	idx := r.Policies.Index()
	if idx == nil || !r.Tracker.HasSynced() {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	prev := &wavev1.Sequence{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: ObjectName(seq)}, prev); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if prev.UID != "" && !ownObject(prev) {
		// Another sequence's object (their hashed names collide): neither reads, writes or
		// deletes the other's status. Nothing of this sequence is decided until the names differ.
		return ctrl.Result{}, fmt.Errorf("the Sequence %s reports on sequence %q, not %q: their names collide; rename one of them", prev.Name, prev.Spec.Sequence, seq)
	}
	// A sequence whose status records a kind the tracker cannot see in full (its LIST fails, access
	// to it was revoked, its API group is down) is not planned on the rest of its members: a plan
	// missing that kind's objects would release later groups' pods early, delete wait Jobs as
	// stale, and let the teardown hold release an earlier group's finalizer while that kind's
	// objects still exist. Only such sequences wait; the others are planned as usual. What does not
	// depend on the order is still released first (below).
	frozen := unavailableKinds(prev, r.Tracker.WhyUnavailable)
	jobs, err := r.waitJobs(ctx, seq)
	if err != nil {
		return ctrl.Result{}, err
	}
	// wavegate acts only in opted-in namespaces: what it holds elsewhere (a namespace opted out) is
	// released, and what it created there goes with the plan that no longer names it.
	sc := newScope(r.Client, r.Namespace).withLive(r.APIReader)
	// When the members were read: the settle dates their changes by when the informer received them,
	// or by the end of this read (set once their namespaces' labels are read too, below).
	rd := reading{started: r.now(), policies: idx, arrived: map[types.UID]time.Time{}}
	objs, outside := sc.split(ctx, r.Tracker.Members(seq))
	fresh := &freshView{r: r, seq: seq, idx: idx, scope: sc, unavailable: unavailable}
	pods, err := r.sequencePods(ctx, seq, fresh.joins(ctx))
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.releaseOutside(ctx, pods, outside, sc); err != nil {
		return ctrl.Result{}, err
	}
	if frozen != "" {
		return r.frozen(ctx, prev, frozen)
	}
	ms := make([]Member, 0, len(objs))
	mos := make([]memberObject, 0, len(objs))
	// A claim's readiness depends on its StorageClass (WaitForFirstConsumer): read from the cache.
	env := readiness.ClientEnv{Reader: r.Client, Ctx: ctx}
	rd.namespaces = map[string]string{}
	for _, o := range objs {
		nsLabels := sc.Labels(ctx, o.GetNamespace())
		if _, ok := rd.namespaces[o.GetNamespace()]; !ok {
			rd.namespaces[o.GetNamespace()] = labels.Set(nsLabels).String()
		}
		if m, ok := toMember(o.Kind, o.Unstructured, idx, nsLabels); ok {
			m.Ready = ptr.To(checker(idx, m).CheckIn(o.Unstructured, env))
			ms = append(ms, m)
			mos = append(mos, memberObject{Member: m, Object: o.Unstructured})
			if !o.Arrived.IsZero() {
				rd.arrived[m.UID] = o.Arrived
			}
		}
	}
	// The namespaces' labels may have been read live meanwhile (a pod's that seemed opted out): a
	// change they show is dated no sooner than now.
	rd.ended = r.now()
	succeeded, err := r.succeededWaiters(ctx, seq, jobs)
	if err != nil {
		return ctrl.Result{}, err
	}
	refused := r.refusals.of(seq, prev, jobs, r.now())
	fresh.refused = refused
	plan := planRefused(seq, ms, idx, jobStates(jobs, succeeded), r.Namespace, refused, r.now())
	r.refusals.keepOnly(seq, plan, prev, r.now())
	open := map[string]bool{}
	for _, g := range plan {
		open[g.Name] = g.Open
	}
	for i := range mos {
		mos[i].Open = open[mos[i].Resolution.Group]
	}
	inversions := Inversions(mos)

	// Teardown and creation ordering are independent steps: a failed teardown step (a cleanup LIST,
	// say) does not stop wait Jobs and ungating, nor the other way round. Every step runs, the
	// status is written from what they did, and their errors are returned together (a retry).
	var errs []error
	td, err := r.holder(unavailable).Reconcile(ctx, seq, objs, idx, sc)
	if err != nil {
		errs = append(errs, fmt.Errorf("teardown: %w", err))
	}
	if seq == "" {
		// Nothing joins a sequence without a name: what carries a group label and names none (a
		// cluster-scoped object without wavegate.io/sequence, a label set to "") is no member, and
		// has no Sequence to report on it (its name would be invalid, and the write failed on every
		// retry). Teardown has released the finalizer of such an object that is being deleted (a
		// live one keeps it until its labels resolve again, or it is deleted); gated pods that name
		// it are StrangerReconciler's.
		if len(errs) > 0 {
			return ctrl.Result{}, errors.Join(errs...)
		}
		return ctrl.Result{RequeueAfter: td.Requeue}, nil
	}
	// A sequence without members, wait Jobs or objects to hold has nothing to order or report, and
	// its Sequence goes; but not while it has gated pods (bare pods, an untracked controller's:
	// pods are never members), which nothing would release after it.
	empty := len(plan) == 0 && len(jobs) == 0 && len(objs) == 0 && err == nil
	if empty && !anyGated(pods) {
		if r.Tracker.Generation() != view {
			return ctrl.Result{}, errViewChanged
		}
		r.forget(seq)
		return ctrl.Result{}, client.IgnoreNotFound(r.deleteSequence(ctx, prev))
	}
	// Opening a group (starting its wait Job's clock, removing its pods' gates) is decided twice:
	// on the cache, then on a consistent read, so that a lagging cache never opens a group early;
	// and only once the sequence's members have settled (an apply still creating an earlier
	// group's objects after a later group's).
	opening := openGroups(plan)
	held := r.settling.wait(seq, plan, rd, r.settleMax())
	if held.Wait > 0 {
		opening = opening.closed()
	}
	gate := newOpener(opening, func() (openness, error) { return fresh.plan(ctx) })
	// Ungating comes first: it is what the next group waits for at a boundary. The gates are
	// removed while the other steps run.
	gated, err := r.ungate(ctx, pods, gate, fresh)
	if err != nil {
		errs = append(errs, err)
	}
	if len(gated.pods) > 0 {
		// What a release was decided on: an ordering that went wrong is traced from this line.
		log.Info("Releasing gated pods", "pods", len(gated.pods), "groups", slices.Sorted(maps.Keys(gated.released)),
			"released", releasedRevisions(plan), "settle", held.Settle)
	}
	if empty && (held.Wait > 0 || len(gated.gated) == 0) {
		// Only gated pods: once the members have settled, nothing comes before them (the consistent
		// read agreeing), so they go, and the Sequence with them. No status is written for the
		// moment they wait, and admission is told of no cleared template: no status would replace
		// it. Pods that still wait (for a group their policy requires, which has no members yet)
		// are reported in the status below.
		if err := r.release(ctx, gated); err != nil {
			errs = append(errs, err)
		}
		if len(errs) > 0 || len(gated.gated) > 0 {
			return ctrl.Result{RequeueAfter: r.left(held.Wait, rd.ended)}, errors.Join(errs...)
		}
		if r.Tracker.Generation() != view {
			return ctrl.Result{}, errViewChanged
		}
		r.forget(seq)
		return ctrl.Result{}, client.IgnoreNotFound(r.deleteSequence(ctx, prev))
	}
	// Admission lets the new pods of a released template start without the gate. It hears so from
	// this replica at once, and from the status, written beside the other steps, on every replica:
	// each pod a ReplicaSet creates before admission knows is gated, and waits for another pass and
	// another consistent read (a third of a hundred pods on the local cluster, when admission heard
	// it from the status written after the wait Jobs' steps). Events are decided first, on the
	// status as it was.
	if r.Cleared != nil && len(gated.released) > 0 {
		r.Cleared.Clear(seq, gated.released)
	}
	r.emitEvents(seq, plan, prev, mos)
	var again time.Duration
	status := goStep("writing the status", func() (err error) {
		// The status records the kinds of the sequence's members: written from a partial view, it
		// would forget a kind whose informer was being replaced, and nothing would stop the
		// sequence from being planned without it once the kind turns out unavailable.
		if r.Tracker.Generation() != view {
			return errViewChanged
		}
		again, err = r.writeStatus(ctx, seq, plan, refused, gated, td, inversions, held, prev)
		return err
	})
	released := goStep("removing scheduling gates", func() error { return r.release(ctx, gated) })
	// Wait Jobs are created, armed, disarmed and deleted on the plan, and a plan made on a partial
	// view (the tracker re-listed after the pass read the members) lacks the groups whose members it
	// missed: it would delete their Jobs as stale, Complete ones among them, and released groups
	// would wait again, the new pods of the groups after them too. Such a pass leaves the Jobs alone
	// (openJobs and deleteStaleJobs return errViewChanged) and is retried. (Gates are removed only on
	// the consistent read, the status is written only on an unmoved view.)
	armLater, refusedJobs, err := r.openJobs(ctx, view, seq, plan, jobs, succeeded, gate, td)
	if err != nil {
		errs = append(errs, err)
	}
	for _, refused := range refusedJobs {
		// Not an error to retry at once: a policy or a quota refuses it, and it is asked for again
		// every refusalRetry. Said where a user looks, not only in the manager's log.
		log.Info("Wait Job refused", "group", refused.group, "error", refused.err.Error())
		if prev.UID != "" {
			r.Recorder.Eventf(prev, nil, corev1.EventTypeWarning, ReasonWaitJobRefused, "Order",
				"group %s cannot open: %v; allow wavegate's wait Jobs (label %s) in the policies or quotas that refuse them; "+
					"while it is open, its timeout counts from the first refusal", refused.group, refused.err, keys.WaitJobLabel)
		}
		armLater = minPositive(armLater, refusalRetry)
	}
	for _, g := range plan {
		if since, ok := refused[jobKey(g)]; ok && g.JobRefused && g.JobState == JobMissing {
			// The group times out at since + its timeout: a pass then.
			armLater = minPositive(armLater, max(since.Add(g.Timeout).Sub(r.now()), time.Millisecond))
		}
	}
	if err := r.deleteStaleJobs(ctx, view, plan, jobs); err != nil && !slices.Contains(errs, errViewChanged) {
		errs = append(errs, err)
	}
	observeReleases(plan, jobs, succeeded, gated, r.now())
	requeue := minPositive(minPositive(td.Requeue, armLater), r.left(held.Recheck, rd.ended))
	if err := <-status; err != nil {
		errs = append(errs, err)
	} else {
		requeue = minPositive(requeue, again)
	}
	if err := <-released; err != nil {
		errs = append(errs, err)
	}
	return ctrl.Result{RequeueAfter: requeue}, errors.Join(errs...)
}

// settleMax is SettleMax, defaulted.
func (r *Reconciler) settleMax() time.Duration {
	if r.SettleMax > 0 {
		return r.SettleMax
	}
	return MembershipSettleMax
}

// left returns what is left now of a wait d that began at from (none if d is none): the settle's
// recheck counts from the members' read, not from the end of the pass that read them.
func (r *Reconciler) left(d time.Duration, from time.Time) time.Duration {
	if d <= 0 {
		return 0
	}
	return max(d-r.now().Sub(from), time.Nanosecond)
}

// anyGated reports whether a pod carries wavegate's gate and is not being deleted.
func anyGated(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if HasGate(p) && p.DeletionTimestamp == nil {
			return true
		}
	}
	return false
}

// forget drops what this manager remembers of a sequence whose Sequence goes.
func (r *Reconciler) forget(seq string) {
	metrics.Forget(seq)
	r.statusWrites.forget(seq)
	r.emitted.forget(seq)
	r.settling.forget(seq)
	r.refusals.forget(seq)
}

// goStep runs one step of a reconcile beside the others. A panic in it would not reach
// controller-runtime's recovery: it becomes the step's error.
func goStep(what string, step func() error) <-chan error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("%s: panic: %v", what, p)
			}
		}()
		done <- step()
	}()
	return done
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// event records an Event on a member, unless its namespace is being deleted.
func (r *Reconciler) event(o *unstructured.Unstructured, typ, reason, format string, args ...any) {
	teardown.Eventf(r.Client, r.Recorder, o, typ, reason, format, args...)
}

// holder is ordered teardown's step, on the reconciler's clients.
func (r *Reconciler) holder(unavailable map[schema.GroupVersionResource]string) *teardown.Holder {
	return &teardown.Holder{Client: r.Client, Tracker: r.Tracker, Recorder: r.Recorder, Now: r.Now, Unavailable: unavailable}
}

// viewMoved reports whether the tracker's view moved since a pass read its members at view.
func (r *Reconciler) viewMoved(view uint64) bool { return r.Tracker.Generation() != view }

// errViewChanged is returned by a pass whose members' view changed while it ran: it writes no
// status, deletes no Sequence and touches no wait Job from it, and is retried.
var errViewChanged = errors.New("the tracked members changed while the pass ran (informers re-listed, or a kind failing): retrying")

// startJobs is the first decision on wait Jobs, on the cache alone: the Job of a group's current
// revision is created, unarmed, as soon as the cache shows the group open or next (Prestart).
// Creating it opens nothing: the waiter only watches, and an unarmed Job has no deadline, so a
// cache that lags (an earlier group it has not seen yet) costs at most a Job that deleteStaleJobs
// removes. Its pod start is then off the group's path, which would otherwise wait for the
// consistent read first.
//
// A group whose members are being deleted gets its Job too when it still has members that are not
// (the plan leaves the deleted ones out): one member pruned while the group stays (a ConfigMap
// dropped from Git, held by teardown while later groups exist) changes the group's revision, and a
// group without the Job of its revision is never released, so every later group's new pods would
// stay gated for as long as the pruned member is held, for good. A group whose members are all
// being deleted is not in the plan.
func startJobs(plan []*Group) []*Group {
	var out []*Group
	for _, g := range plan {
		// A group timed out for want of its Job (planRefused) still asks for it, unless that released
		// it: a group released on its timeout stays released, as with a Job that timed out.
		if g.JobName != "" && (g.JobState == JobMissing || g.JobRefused && !g.Released) && (g.Open || g.Prestart) {
			out = append(out, g)
		}
	}
	return out
}

// armJobs is the second, through the opener: an open group's Job that has no deadline yet (created
// a moment ago by startJobs, or started ahead of the group's turn) is armed with the group's
// timeout once the opener opens the group, because the timeout counts from then. unarmed reports
// whether a group's Job exists without a deadline.
func armJobs(plan []*Group, gate *opener, unarmed func(*Group) bool) ([]*Group, error) {
	var out []*Group
	for _, g := range plan {
		if g.JobName == "" || !g.Open || g.JobState != JobMissing && g.JobState != JobRunning || !unarmed(g) {
			continue
		}
		open, err := gate.Open(g.Name)
		if err != nil {
			return out, err
		}
		if open {
			out = append(out, g)
		}
	}
	return out, nil
}

// disarmJobs is the third, on the cache alone: a group whose Job was armed when it opened, and
// that is no longer open while its Job still runs (an earlier group changed: an upgrade, a new
// member), gets its Job's deadline removed, so that the group's timeout counts again from when it
// reopens (armJobs arms it then) and not through the earlier group's new rollout. A Job that is
// complete or failed keeps what it has: a released group stays released. armed reports whether a
// group's Job has a deadline.
//
// The cache decides alone because a disarm only errs long: a cache that lags behind an earlier
// group's release disarms a Job whose group is open again, which the next pass (the cache catching
// up) arms again, counting from then. The decision rests on the Job and the plan, so a restarted
// manager disarms what it finds armed. A disarmed Job is then unarmed like one started ahead of
// its group's turn: kept while its group is next (Prestart: the group that changed is the one
// before it), else deleted by deleteStaleJobs, so that at most two waiters run per sequence (the
// group that changed is further up, or failed or timed out); its group gets a new one when it is
// open or next again.
func disarmJobs(plan []*Group, armed func(*Group) bool) []*Group {
	var out []*Group
	for _, g := range plan {
		if g.JobName != "" && !g.Open && g.JobState == JobRunning && armed(g) {
			out = append(out, g)
		}
	}
	return out
}

// openJobs carries out startJobs, armJobs and disarmJobs, and re-arms the Jobs of open groups whose
// timeout changed (rearmDeadline: a longer one on the cache, a shorter one through the opener),
// their API calls side by side (a pass
// that releases a group's first pods also creates the next group's Job and arms its own: one after
// the other, they held up the next pass by up to 150 ms on the local cluster). It returns when to
// come back for a Job it left unarmed (zero: none).
//
// A Job this manager created less than armingGrace ago is armed only by a pass that makes the
// consistent read anyway (to release pods): a pass that read only to arm would hold up, for the
// length of that read and patch, the next pass, which releases the group's first pods (a
// ReplicaSet creates them a moment after its Deployment). Arming later only starts the group's
// clock later (armDeadline counts from the arming); a restarted manager, which remembers no
// creation, arms at once. A Job this pass creates is armed by it when the pass has made that read
// and the read opened its group. Nothing is done once the tracker's view has moved past the one
// the plan was made on (view): errViewChanged.
func (r *Reconciler) openJobs(ctx context.Context, view uint64, seq string, plan []*Group, jobs []batchv1.Job, succeeded map[types.UID]time.Time,
	gate *opener, td *teardown.Result) (time.Duration, []*refusedJobError, error) {
	if r.viewMoved(view) {
		return 0, nil, errViewChanged
	}
	byKey := jobsByKey(jobs)
	now := r.now()
	var later time.Duration
	wait := func(d time.Duration) { later = minPositive(later, d) }
	unarmed := func(g *Group) bool {
		j := byKey[g.JobNamespace+"/"+g.JobName]
		if j == nil || j.Spec.ActiveDeadlineSeconds != nil {
			return false
		}
		if d := r.created.grace(j.UID, now); d > 0 && !gate.Read() {
			wait(d)
			return false
		}
		return true
	}
	// Every decision is made first (the opener is not safe for concurrent use), the calls after.
	arm, err := armJobs(plan, gate, unarmed)
	disarm := disarmJobs(plan, func(g *Group) bool {
		j := byKey[g.JobNamespace+"/"+g.JobName]
		return j != nil && j.DeletionTimestamp == nil && j.Spec.ActiveDeadlineSeconds != nil
	})
	unstamp := unstampJobs(plan, func(g *Group) bool {
		j := byKey[g.JobNamespace+"/"+g.JobName]
		if j == nil || j.DeletionTimestamp != nil {
			return false
		}
		_, carried := carriedOpening(j)
		return carried
	})
	starts := startJobs(plan)
	rearm := map[*Group]int64{}
	for _, g := range plan {
		j := byKey[g.JobNamespace+"/"+g.JobName]
		d, ok := rearmDeadline(j, g)
		if ok && d < *j.Spec.ActiveDeadlineSeconds {
			// A shorter deadline may time the group out, and release the groups after it: only on
			// the consistent read, as an opening.
			open, oerr := gate.Open(g.Name)
			err, ok = errors.Join(err, oerr), open
		}
		if ok {
			rearm[g] = d
		}
	}
	armStarted, armByALaterPass := make([]bool, len(starts)), make([]bool, len(starts))
	for i, g := range starts {
		if !g.Open || !gate.Read() {
			// Armed by a later pass, if its Job is created (a refused one is asked for again at
			// refusalRetry, not by arming's quick passes).
			armByALaterPass[i] = g.Open
			continue
		}
		open, oerr := gate.Open(g.Name)
		err = errors.Join(err, oerr)
		armStarted[i] = open
	}
	var mu sync.Mutex
	fail := func(e error) {
		mu.Lock()
		defer mu.Unlock()
		err = errors.Join(err, e)
	}
	refused := make([]*refusedJobError, len(starts))
	var wg sync.WaitGroup
	// Groups that closed again lose their clock first: until then no Job is created (an earlier
	// group's, whose release would reopen them). A disarm that failed, then a restart while that
	// group is released, would otherwise leave the reopened group armed from its earlier opening.
	closing := make([]error, len(disarm)+len(unstamp))
	for i, g := range disarm {
		wg.Go(func() { closing[i] = r.disarmJob(ctx, byKey[g.JobNamespace+"/"+g.JobName], g) })
	}
	for i, g := range unstamp {
		wg.Go(func() { closing[len(disarm)+i] = r.unstampJob(ctx, byKey[g.JobNamespace+"/"+g.JobName], g) })
	}
	wg.Wait()
	if cerr := errors.Join(closing...); cerr != nil {
		return later, nil, errors.Join(err, cerr)
	}
	for i, g := range starts {
		var since time.Time
		if g.Open {
			since = waitingSince(jobs, succeeded, seq, g)
		}
		wg.Go(func() {
			j, cerr := r.createJob(ctx, seq, g, since)
			if errors.As(cerr, &refused[i]) {
				return
			}
			if cerr != nil || j == nil {
				fail(cerr)
				return
			}
			r.created.add(j.UID, now)
			if armStarted[i] {
				fail(r.armJob(ctx, j, g))
			}
		})
	}
	for _, g := range arm {
		wg.Go(func() { fail(r.armJob(ctx, byKey[g.JobNamespace+"/"+g.JobName], g)) })
	}
	for g, d := range rearm {
		wg.Go(func() { fail(r.rearmJob(ctx, byKey[g.JobNamespace+"/"+g.JobName], g, d)) })
	}
	wg.Wait()
	// A refusal starts the group's clock only once the group is open on the consistent read (a
	// lagging cache may show it open early); a clock already running is not read for again. A new
	// refusal brings a pass back within a second, which writes it into the status (where a restarted
	// manager finds it) and, for a short timeout, times the group out.
	var out []*refusedJobError
	for i, g := range starts {
		if refused[i] == nil {
			if armByALaterPass[i] {
				wait(armingGrace)
			}
			continue
		}
		out = append(out, refused[i])
		if g.JobRefused || !g.Open {
			continue
		}
		open := armStarted[i]
		if !open {
			var oerr error
			open, oerr = gate.Open(g.Name)
			err = errors.Join(err, oerr)
		}
		if open {
			r.refusals.note(seq, jobKey(g), now)
			wait(min(time.Second, g.Timeout))
		}
	}
	return later, out, err
}

// minPositive is the sooner of two requeues, zero meaning none.
func minPositive(a, b time.Duration) time.Duration {
	switch {
	case b <= 0:
		return max(a, 0)
	case a <= 0 || b < a:
		return b
	}
	return a
}

// armingGrace is how long a Job this manager created waits for a pass that reads anyway to arm it.
const armingGrace = 250 * time.Millisecond

// recentCreations are the wait Jobs this manager created, for armingGrace. Like recentReleases it
// is only an optimization: a restarted manager arms at once.
type recentCreations struct {
	mu   sync.Mutex
	jobs map[types.UID]time.Time
}

func (c *recentCreations) add(uid types.UID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs = map[types.UID]time.Time{}
	}
	for u, t := range c.jobs {
		if now.Sub(t) >= armingGrace {
			delete(c.jobs, u)
		}
	}
	c.jobs[uid] = now
}

// grace returns how much longer a Job may wait to be armed (zero: arm now).
func (c *recentCreations) grace(uid types.UID, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.jobs[uid]
	if !ok {
		return 0
	}
	return max(armingGrace-now.Sub(t), 0)
}

func checker(idx *policy.Index, m Member) *readiness.Checker {
	if m.Resolution.Policy != nil {
		return idx.Checker(m.Resolution.Policy.Policy)
	}
	return idx.Checker("")
}

func toMember(k members.Kind, o metav1.Object, idx *policy.Index, nsLabels map[string]string) (Member, bool) {
	ns := o.GetNamespace()
	if !k.Namespaced {
		ns = ""
	}
	res, errs := resolve.Resolve(resolve.Object{Namespace: ns, NamespaceLabels: nsLabels, Labels: o.GetLabels()}, idx)
	if res == nil || len(errs) > 0 || o.GetDeletionTimestamp() != nil {
		return Member{}, false
	}
	return Member{GVR: k.GVR, APIVersion: k.GVK.GroupVersion().String(), Kind: k.GVK.Kind, Namespace: ns,
		Name: o.GetName(), UID: o.GetUID(), Generation: o.GetGeneration(), Resolution: res}, true
}

// releasedRevisions names the released groups of a plan with their revisions ("database@1a2b3c4d5e").
func releasedRevisions(plan []*Group) []string {
	var out []string
	for _, g := range plan {
		if g.Released {
			out = append(out, g.Name+"@"+g.Revision)
		}
	}
	return out
}
