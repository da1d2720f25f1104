package sequence

// Wait Jobs: listing them, reading their state, building, creating and pruning them.

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/patch"
	"wavegate.io/wavegate/pkg/resolve"
	"wavegate.io/wavegate/pkg/waiter"
)

func (r *Reconciler) waitJobs(ctx context.Context, seq string) ([]batchv1.Job, error) {
	var list batchv1.JobList
	if err := r.Client.List(ctx, &list, client.MatchingLabels{keys.WaitJobLabel: "true", keys.WaitSequenceLabel: seq}); err != nil {
		return nil, fmt.Errorf("listing wait Jobs: %w", err)
	}
	return list.Items, nil
}

// succeededWaiters returns the UIDs of the wait Jobs of a sequence whose waiter found every member
// ready, with when (zero if unknown): the waiter marked its Job with the time
// (keys.WaiterReadyAnnotation), or its pod succeeded (the waiter exited 0). It is the same evidence as the Job's Complete condition,
// which the Job controller writes only after batching pod updates (about a second later); and the
// mark comes before the pod's exit is reported, which a kubelet notices at its next PLEG relist
// (every second). Only a pod in its Job's namespace counts (owner references do not cross
// namespaces).
func (r *Reconciler) succeededWaiters(ctx context.Context, seq string, jobs []batchv1.Job) (map[types.UID]time.Time, error) {
	out := map[types.UID]time.Time{}
	for i := range jobs {
		// Only a time counts: anything else is not what a waiter writes (its pod's exit still counts).
		// And only from a waiter of the Job's own arguments (see waiter.Args.Fingerprint).
		at, err := time.Parse(time.RFC3339Nano, jobs[i].Annotations[keys.WaiterReadyAnnotation])
		if err != nil {
			continue
		}
		if a, ok := waiterArgs(&jobs[i]); ok && jobs[i].Annotations[keys.WaiterCheckedAnnotation] == a.Fingerprint() {
			out[jobs[i].UID] = at
		}
	}
	if r.WaitPods == nil {
		return out, nil
	}
	jobNS := make(map[types.UID]string, len(jobs))
	for i := range jobs {
		jobNS[jobs[i].UID] = jobs[i].Namespace
	}
	var pods corev1.PodList
	if err := r.WaitPods.List(ctx, &pods, client.MatchingLabels{keys.WaitJobLabel: "true", keys.WaitSequenceLabel: seq}); err != nil {
		return nil, fmt.Errorf("listing wait-Job pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		c := metav1.GetControllerOfNoCopy(p)
		if c == nil || c.Kind != "Job" || p.Status.Phase != corev1.PodSucceeded || jobNS[c.UID] != p.Namespace {
			continue
		}
		if _, marked := out[c.UID]; marked {
			continue
		}
		var finished time.Time
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.FinishedAt.After(finished) {
				finished = t.FinishedAt.Time
			}
		}
		out[c.UID] = finished
	}
	return out, nil
}

// jobsByKey indexes wait Jobs by "namespace/name".
func jobsByKey(jobs []batchv1.Job) map[string]*batchv1.Job {
	out := make(map[string]*batchv1.Job, len(jobs))
	for i := range jobs {
		out[jobs[i].Namespace+"/"+jobs[i].Name] = &jobs[i]
	}
	return out
}

// jobStates reads wait Jobs' states: from their conditions, and a Job whose waiter succeeded (its
// mark, or its pod's exit 0) is complete, whatever the Job controller concluded later: a waiter that
// finds its group ready a moment before the group's timeout exits 0, but the Job controller, which
// hears of the exit a second or two later, checks the deadline first and fails the Job with
// DeadlineExceeded. The group was ready, and stays released.
//
// The success of a Job's own waiter is final, like the Complete condition that follows it: a
// group released stays released when its policy's readiness settings change a moment later. A
// running Job whose waiter has not succeeded and judges by other settings than the group's now is
// replaced (deleteStaleJobs); the mark of the replaced Job's waiter on the new one does not count
// (succeededWaiters).
func jobStates(jobs []batchv1.Job, succeeded map[types.UID]time.Time) JobStates {
	byKey := jobsByKey(jobs)
	return func(g *Group) JobState {
		j, ok := byKey[g.JobNamespace+"/"+g.JobName]
		if !ok {
			return JobMissing
		}
		s := StateOf(j)
		if _, ok := succeeded[j.UID]; ok && s != JobFailed {
			// A waiter that found a member failed for good never succeeds: JobFailed stands.
			return JobComplete
		}
		return s
	}
}

// waiterArgs parses the arguments a wait Job runs its waiter with (false: none that parse).
func waiterArgs(j *batchv1.Job) (waiter.Args, bool) {
	return parseWaiter(j, waiter.ParseArgs)
}

func parseWaiter(j *batchv1.Job, parse func([]string) (waiter.Args, error)) (waiter.Args, bool) {
	for _, c := range j.Spec.Template.Spec.Containers {
		if c.Name == WaiterContainer {
			a, err := parse(c.Args)
			return a, err == nil
		}
	}
	return waiter.Args{}, false
}

// staleWaiter reports whether a wait Job's waiter judges the group's members by other readiness
// settings than the group's (or cannot be read). The members are the same: the Job's name comes
// from the group's revision. Only the settings are parsed (a pass asks it of every running Job).
func staleWaiter(j *batchv1.Job, g *Group) bool {
	a, ok := parseWaiter(j, waiter.ParseReadiness)
	return !ok || !equality.Semantic.DeepEqual(a.Readiness, g.Readiness) ||
		!equality.Semantic.DeepEqual(a.NamespaceReadiness, g.NamespaceReadiness)
}

// StateOf reads a wait Job's state from its conditions. The Job controller fails a wait Job with
// reason DeadlineExceeded when the group's timeout (activeDeadlineSeconds) passes, PodFailurePolicy
// when its waiter exits with waiter.ExitFailed (a member failed for good: the Job's FailJob rule),
// and BackoffLimitExceeded when the waiter failed more than waiterBackoffLimit times otherwise
// (errors, crashes, OOM kills, deleted pods; disruptions do not count). A Job made before wait
// Jobs had a pod failure policy failed at the waiter's first failure of any kind, for a member as
// the waiter's log says.
func StateOf(j *batchv1.Job) JobState {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return JobComplete
		case batchv1.JobFailed:
			switch {
			case c.Reason == batchv1.JobReasonDeadlineExceeded:
				return JobTimedOut
			case c.Reason == batchv1.JobReasonPodFailurePolicy, j.Spec.PodFailurePolicy == nil:
				return JobFailed
			default:
				return JobWaiterFailed
			}
		}
	}
	return JobRunning
}

// WaiterContainer is the name of the waiter's container in a wait Job's pod.
const WaiterContainer = "wait"

// waiterBackoffLimit is how many times a wait Job's waiter may fail, other than for a member that
// failed for good and other than by a disruption, before the Job fails (the Job controller's
// default). The Job controller waits 10 s before the first retry, doubling: the Job fails some
// ten minutes after the first failure, unless the group's timeout comes first.
const waiterBackoffLimit = 6

// waiterRequests are the waiter's resource requests: a pod without any is BestEffort, the first a
// node under pressure evicts, and refused in a namespace whose ResourceQuota tracks requests.
var waiterRequests = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("10m"),
	corev1.ResourceMemory: resource.MustParse("32Mi"),
}

// waiterFailurePolicy decides what a failed waiter pod means to its Job: the waiter found a member
// that failed for good (waiter.ExitFailed) fails the Job at once; a pod disrupted (evicted,
// preempted, drained, its node gone) is replaced without counting; any other failure (an error,
// a crash, an OOM kill, a pod deleted by hand) counts toward the backoff limit. The group's
// timeout is the Job's activeDeadlineSeconds, counted from the Job's start whatever its pods do.
func waiterFailurePolicy() *batchv1.PodFailurePolicy {
	return &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: ptr.To(WaiterContainer), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{waiter.ExitFailed}}},
		{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
	}}
}

// createJob creates the wait Job of a group's current revision, unarmed (armJob gives it the
// group's timeout when the group opens), and returns it; nil when there is nothing to arm: the
// namespace is being deleted, or the Job exists already (a cache that has not seen it yet).
func (r *Reconciler) createJob(ctx context.Context, seq string, g *Group, since time.Time) (*batchv1.Job, error) {
	job := r.waitJob(seq, g)
	if !since.IsZero() {
		if job.Annotations == nil {
			job.Annotations = map[string]string{}
		}
		job.Annotations[keys.WaitingSinceAnnotation] = since.UTC().Format(time.RFC3339Nano)
	}
	// Its pod needs the waiter's ServiceAccount (the API server refuses the pod without it, and the
	// Job controller would try again a second or more later): without one in the cache the Job is
	// created suspended, and the waiter-RBAC controller resumes it once its access exists. With
	// one, it starts at once, and its waiter waits for the rest of its access (its Role's rules,
	// written at the same time) by itself.
	job.Spec.Suspend = ptr.To(!r.hasWaiterAccount(ctx, job.Namespace))
	err := r.Client.Create(ctx, job)
	switch {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil, nil // the namespace is being deleted: its groups are torn down, not created
	case apierrors.IsAlreadyExists(err):
		return nil, nil
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return nil, &refusedJobError{group: g.Name, err: fmt.Errorf("creating wait Job %s: %w", klog.KObj(job), err)}
	case err != nil:
		return nil, fmt.Errorf("creating wait Job %s: %w", klog.KObj(job), err)
	}
	ctrl.LoggerFrom(ctx).Info("Created wait Job", "job", klog.KObj(job), "group", g.Name, "revision", g.Revision, "open", g.Open)
	return job, nil
}

// hasWaiterAccount reports whether the cache has the ServiceAccount wait Jobs run as, made by
// the waiter-RBAC controller, in a namespace.
func (r *Reconciler) hasWaiterAccount(ctx context.Context, namespace string) bool {
	sa := &corev1.ServiceAccount{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: WaiterServiceAccount}, sa)
	return err == nil && sa.DeletionTimestamp == nil && sa.Labels[keys.WaiterRBACLabel] == "true"
}

// armDeadline is the activeDeadlineSeconds that makes a Job created at created time out no
// earlier than timeout after now: the Job controller counts it from the Job's startTime, which is
// never before its creationTimestamp (itself truncated to the second, so the clock errs long).
func armDeadline(created, now time.Time, timeout time.Duration) int64 {
	d := int64(math.Ceil((timeout + now.Sub(created)).Seconds()))
	return max(d, 1)
}

// armJob gives a wait Job that started ahead of its group's turn the group's timeout, counted from
// now, when the group opens, and records when (keys.WaitOpenedAnnotation). A Job made for a new
// revision of a group that was open and waiting (keys.WaitingSinceAnnotation, see waitingSince) counts
// it from when the group opened instead, the first time it is armed: one disarmed since (its group
// closed again) counts from its reopening. Only a Job without a deadline is armed, so a restarted
// manager arms only what was not armed yet (a cache that lags re-arms a moment later, which errs
// long).
func (r *Reconciler) armJob(ctx context.Context, j *batchv1.Job, g *Group) error {
	now := r.now()
	opened := now
	if t, ok := carriedOpening(j); ok && t.Before(now) {
		opened = t
	}
	d := armDeadline(j.CreationTimestamp.Time, opened, g.Timeout)
	ops := patch.SetEntries([]patch.Operation{patch.Add("/spec/activeDeadlineSeconds", d)}, "/metadata/annotations", j.Annotations,
		map[string]string{keys.WaitOpenedAnnotation: opened.UTC().Format(time.RFC3339Nano)})
	gone, err := r.patchJSON(ctx, j, ops...)
	if err != nil {
		return fmt.Errorf("arming wait Job %s: %w", klog.KObj(j), err)
	}
	if !gone {
		ctrl.LoggerFrom(ctx).Info("Armed wait Job", "job", klog.KObj(j), "group", g.Name, "activeDeadlineSeconds", d,
			"waitingFor", now.Sub(opened).Round(time.Millisecond))
	}
	return nil
}

// waitingSince is when a group that is open and gets a new revision opened: the earliest opening of
// its earlier revisions' wait Jobs in the new Job's namespace that are still running and have not
// found the group ready (no mark, no Complete condition, no pod that exited 0: succeeded). An
// armed one's opening is its keys.WaitOpenedAnnotation; one not armed yet (a settle, a read that
// did not open the group yet) carries the opening it was made with (keys.WaitingSinceAnnotation),
// which unstampJobs removes from a Job whose group is seen closed. A group whose members keep
// changing (two controllers fighting over a spec, an autoscaler resizing a workload that never
// becomes available) would otherwise start its timeout afresh with each revision and never time
// out, and the groups after it would wait for good. Zero: the group was released, timed out or
// failed at its last revision (a fix, or an upgrade, gets its whole timeout), or it was not waiting
// open. Only Jobs of the group's own sequence and group, by their labels and their waiter's
// arguments, in the namespace where the new Job runs (a tenant's own, or wavegate's for a shared
// sequence), so that nothing another tenant writes can start a group's clock early.
func waitingSince(jobs []batchv1.Job, succeeded map[types.UID]time.Time, seq string, g *Group) time.Time {
	var since time.Time
	for i := range jobs {
		j := &jobs[i]
		if j.Namespace != g.JobNamespace || j.Name == g.JobName || j.Labels[keys.WaitSequenceLabel] != seq ||
			j.Labels[keys.WaitGroupLabel] != g.Name || StateOf(j) != JobRunning {
			continue
		}
		if _, ok := succeeded[j.UID]; ok {
			continue // its waiter's mark (of the Job's own arguments: succeededWaiters), or its pod's exit 0
		}
		if a, ok := waiterArgs(j); !ok || a.Sequence != seq || a.Group != g.Name {
			continue
		}
		var opened time.Time
		var ok bool
		if j.Spec.ActiveDeadlineSeconds != nil {
			t, err := time.Parse(time.RFC3339Nano, j.Annotations[keys.WaitOpenedAnnotation])
			opened, ok = t, err == nil
		} else if j.DeletionTimestamp == nil {
			// Not armed: only one never armed (a disarmed Job's group closed again), and not being
			// deleted, counts, by the opening it was made with.
			opened, ok = carriedOpening(j)
		}
		if ok && (since.IsZero() || opened.Before(since)) {
			since = opened
		}
	}
	return since
}

// carriedOpening is the opening a wait Job was made with (keys.WaitingSinceAnnotation, see
// waitingSince) while it has never been armed (no keys.WaitOpenedAnnotation); false otherwise.
func carriedOpening(j *batchv1.Job) (time.Time, bool) {
	if _, armed := j.Annotations[keys.WaitOpenedAnnotation]; armed {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, j.Annotations[keys.WaitingSinceAnnotation])
	return t, err == nil
}

// unstampJobs returns the groups that are not open whose wait Job was made with the opening of an
// earlier revision (keys.WaitingSinceAnnotation) and has not been armed since: their group closed
// again (an earlier group changed), so when it reopens its timeout counts from then, as for a Job
// that was disarmed. stamped reports whether a group's Job is such a Job.
func unstampJobs(plan []*Group, stamped func(*Group) bool) []*Group {
	var out []*Group
	for _, g := range plan {
		if g.JobName != "" && !g.Open && stamped(g) {
			out = append(out, g)
		}
	}
	return out
}

// unstampJob removes keys.WaitingSinceAnnotation from a wait Job (unstampJobs).
func (r *Reconciler) unstampJob(ctx context.Context, j *batchv1.Job, g *Group) error {
	gone, err := r.removeFromJob(ctx, j, patch.Pointer("/metadata/annotations", keys.WaitingSinceAnnotation), func(cur *batchv1.Job) bool {
		_, ok := cur.Annotations[keys.WaitingSinceAnnotation]
		return ok
	})
	if err != nil {
		return fmt.Errorf("removing the earlier opening from wait Job %s: %w", klog.KObj(j), err)
	}
	if !gone {
		ctrl.LoggerFrom(ctx).Info("Forgot the earlier opening of wait Job", "job", klog.KObj(j), "group", g.Name,
			"reason", "its group is no longer open: its timeout counts from when it reopens")
	}
	return nil
}

// rearmDeadline is the deadline an armed wait Job of an open group should have: its group's
// timeout counted from when the group opened (keys.WaitOpenedAnnotation). false: the Job has it,
// or cannot be re-armed (not running, not armed, or armed by a manager that did not record when).
func rearmDeadline(j *batchv1.Job, g *Group) (int64, bool) {
	if j == nil || !g.Open || j.DeletionTimestamp != nil || g.JobState != JobRunning || j.Spec.ActiveDeadlineSeconds == nil {
		return 0, false
	}
	opened, err := time.Parse(time.RFC3339Nano, j.Annotations[keys.WaitOpenedAnnotation])
	if err != nil {
		return 0, false
	}
	d := armDeadline(j.CreationTimestamp.Time, opened, g.Timeout)
	return d, d != *j.Spec.ActiveDeadlineSeconds
}

// rearmJob gives an armed wait Job the deadline of its group's timeout now (a policy changed it
// while the group waited), still counted from when the group opened: a shorter timeout that has
// passed already times the group out at once (and releases the groups after it under onTimeout:
// Release, so openJobs shortens a deadline only through the opener), and a longer one lets it
// wait on.
func (r *Reconciler) rearmJob(ctx context.Context, j *batchv1.Job, g *Group, d int64) error {
	gone, err := r.patchJSON(ctx, j, patch.Add("/spec/activeDeadlineSeconds", d))
	if err != nil {
		return fmt.Errorf("re-arming wait Job %s: %w", klog.KObj(j), err)
	}
	if !gone {
		ctrl.LoggerFrom(ctx).Info("Re-armed wait Job", "job", klog.KObj(j), "group", g.Name, "timeout", g.Timeout,
			"activeDeadlineSeconds", d, "was", *j.Spec.ActiveDeadlineSeconds)
	}
	return nil
}

// disarmJob removes the deadline of a wait Job whose group closed again (disarmJobs): the Job
// controller reads activeDeadlineSeconds at each sync, so the Job no longer times out until armJob
// sets it again when the group reopens. A cache that had not seen an earlier disarm yet makes the
// removal fail (422: the path is gone); the Job is then read, and only a deadline it still has is
// an error.
func (r *Reconciler) disarmJob(ctx context.Context, j *batchv1.Job, g *Group) error {
	gone, err := r.removeFromJob(ctx, j, "/spec/activeDeadlineSeconds", func(cur *batchv1.Job) bool { return cur.Spec.ActiveDeadlineSeconds != nil })
	if err != nil {
		return fmt.Errorf("disarming wait Job %s: %w", klog.KObj(j), err)
	}
	if !gone {
		ctrl.LoggerFrom(ctx).Info("Disarmed wait Job", "job", klog.KObj(j), "group", g.Name,
			"reason", "its group is no longer open: its timeout counts again from when it reopens")
	}
	return nil
}

// removeFromJob removes path from a wait Job. A cache that had not seen an earlier removal makes
// it fail (422: the path is gone); the Job is then read, and only one that still has it (has) is an
// error, and one that is gone is reported.
func (r *Reconciler) removeFromJob(ctx context.Context, j *batchv1.Job, path string, has func(*batchv1.Job) bool) (gone bool, err error) {
	gone, err = r.patchJSON(ctx, j, patch.Remove(path))
	if !apierrors.IsInvalid(err) || r.APIReader == nil {
		return gone, err
	}
	cur := &batchv1.Job{}
	switch rerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(j), cur); {
	case apierrors.IsNotFound(rerr):
		return true, nil
	case rerr != nil:
		return false, fmt.Errorf("reading wait Job %s: %w", klog.KObj(j), rerr)
	case !has(cur):
		return true, nil
	}
	return false, err
}

// patchJSON applies a JSON patch to obj as wavegate's field manager; an object that is gone is
// reported, not an error.
func (r *Reconciler) patchJSON(ctx context.Context, obj client.Object, ops ...patch.Operation) (gone bool, err error) {
	return patchJSON(ctx, r.Client, obj, ops...)
}

// patchJSON is the sequence package's one JSON-patch call, for the sequence and waiter-RBAC
// controllers alike.
func patchJSON(ctx context.Context, c client.Client, obj client.Object, ops ...patch.Operation) (gone bool, err error) {
	body, err := patch.Marshal(ops...)
	if err != nil {
		return false, err
	}
	err = c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, body), client.FieldOwner(keys.FieldManager))
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// waitJob builds the wait Job of a group's current revision, without a deadline: armJob sets it
// when the group opens. It is built suspended (see createJob).
func (r *Reconciler) waitJob(seq string, g *Group) *batchv1.Job {
	wa := waiter.Args{Sequence: seq, Group: g.Name, Readiness: g.Readiness, NamespaceReadiness: g.NamespaceReadiness, Job: g.JobNamespace + "/" + g.JobName}
	var owners []metav1.OwnerReference
	for _, m := range g.Members {
		wa.Members = append(wa.Members, waiter.Member{GVR: m.GVR, Namespace: m.Namespace, Name: m.Name, UID: m.UID, Generation: m.Generation})
		if m.Namespace == "" || m.Namespace == g.JobNamespace {
			owners = append(owners, metav1.OwnerReference{APIVersion: m.APIVersion, Kind: m.Kind, Name: m.Name, UID: m.UID})
		}
	}
	args := wa.Encode()
	labels := map[string]string{keys.WaitJobLabel: "true", keys.WaitGroupLabel: g.Name, keys.WaitSequenceLabel: seq, keys.WaitRevisionLabel: g.Revision}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: g.JobName, Namespace: g.JobNamespace, Labels: labels, OwnerReferences: owners,
			Annotations: map[string]string{keys.ArgoCDSyncWaveAnnotation: strconv.Itoa(int(resolve.WaitJobWave(g.Order)))},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:     ptr.To[int32](waiterBackoffLimit),
			PodFailurePolicy: waiterFailurePolicy(),
			Suspend:          ptr.To(true),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{keys.WaitJobLabel: "true", keys.WaitGroupLabel: g.Name, keys.WaitSequenceLabel: seq}},
				Spec: corev1.PodSpec{
					ServiceAccountName: WaiterServiceAccount,
					// A pod failure policy requires Never: each failure is a new pod.
					RestartPolicy: corev1.RestartPolicyNever,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: WaiterContainer, Image: r.Image, Args: args,
						Resources: corev1.ResourceRequirements{Requests: waiterRequests.DeepCopy()},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
				},
			},
		},
	}
}

// deleteStaleJobs deletes the wait Jobs that no group of the plan needs: those of earlier revisions,
// and unarmed ones still running whose group is neither open nor next (an earlier group failed or
// timed out: the waiter would wait for a turn that does not come until that group changes; or the
// Job was disarmed, its group closed again behind a group further up: see disarmJobs). Only while
// the tracker's view stays where the pass read the members the plan was made on (view): a partial
// view misses groups, and their Jobs are not stale (errViewChanged).
func (r *Reconciler) deleteStaleJobs(ctx context.Context, view uint64, plan []*Group, jobs []batchv1.Job) error {
	current := map[string]*Group{}
	for _, g := range plan {
		if g.JobName != "" {
			current[g.JobNamespace+"/"+g.JobName] = g
		}
	}
	for i := range jobs {
		j := &jobs[i]
		g, ok := current[j.Namespace+"/"+j.Name]
		if j.DeletionTimestamp != nil {
			continue
		}
		// A running Job whose waiter has not succeeded and judges by readiness settings the group no
		// longer has is replaced: the next pass creates the group's Job again, with the settings it
		// has now.
		replaced := ok && g.JobState == JobRunning && staleWaiter(j, g)
		if ok && !replaced && (g.Open || g.Prestart || g.JobState != JobRunning || j.Spec.ActiveDeadlineSeconds != nil) {
			continue
		}
		if r.viewMoved(view) {
			return errViewChanged
		}
		// The Job read, not one made again under its name since.
		err := r.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &j.UID})
		if apierrors.IsConflict(err) {
			continue
		}
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting stale wait Job %s: %w", klog.KObj(j), err)
		}
		if replaced {
			ctrl.LoggerFrom(ctx).Info("Replacing wait Job", "job", klog.KObj(j), "group", g.Name,
				"reason", "its group's readiness settings changed while it waited: a waiter with the new ones replaces it")
		}
	}
	return nil
}

// refusedJobError is a wait Job's creation that the API server refused (a policy engine's or
// another webhook's denial, an exhausted ResourceQuota): retrying alone does not fix it, and the
// group cannot open, nor its timeout count, until its Job exists.
type refusedJobError struct {
	group string
	err   error
}

func (e *refusedJobError) Error() string { return e.err.Error() }
func (e *refusedJobError) Unwrap() error { return e.err }
