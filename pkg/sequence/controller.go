package sequence

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/metrics"
	"wavegate.io/wavegate/pkg/patch"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/readiness"
	"wavegate.io/wavegate/pkg/resolve"
	"wavegate.io/wavegate/pkg/waiter"
)

const (
	// PodSequenceIndex indexes cached pods by sequence.
	PodSequenceIndex = "wavegate.io/pod-sequence"
	// WaiterServiceAccount runs wait Jobs.
	WaiterServiceAccount = "wavegate-waiter"
)

// Event reasons.
const (
	ReasonWaitingForGroup = "WaitingForGroup"
	ReasonGroupReleased   = "GroupReleased"
	ReasonGroupTimedOut   = "GroupTimedOut"
	ReasonGroupFailed     = "GroupFailed"
	ReasonUngated         = "Ungated"
)

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
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	seq := req.Name
	log := ctrl.LoggerFrom(ctx).WithValues("sequence", seq)
	ctx = ctrl.LoggerInto(ctx, log)
	idx := r.Policies.Index()
	if idx == nil || !r.Tracker.HasSynced() {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	jobs, err := r.waitJobs(ctx, seq)
	if err != nil {
		return ctrl.Result{}, err
	}
	// wavegate acts only in opted-in namespaces: what it holds elsewhere (a namespace opted out) is
	// released, and what it created there goes with the plan that no longer names it.
	sc := newScope(r.Client, r.Namespace)
	objs, outside := sc.split(ctx, r.Tracker.Members(seq))
	if err := r.releaseOutside(ctx, seq, outside, sc); err != nil {
		return ctrl.Result{}, err
	}
	ms := make([]Member, 0, len(objs))
	mos := make([]memberObject, 0, len(objs))
	// A claim's readiness depends on its StorageClass (WaitForFirstConsumer): read from the cache.
	env := readiness.ClientEnv{Reader: r.Client, Ctx: ctx}
	for _, o := range objs {
		if m, ok := toMember(o.Kind, o.Unstructured, idx, sc.labels(ctx, o.GetNamespace())); ok {
			m.Ready = ptr.To(checker(idx, m).CheckIn(o.Unstructured, env))
			ms = append(ms, m)
			mos = append(mos, memberObject{Member: m, Object: o.Unstructured})
		}
	}
	plan := Plan(seq, ms, idx, jobStates(jobs), r.Namespace)
	open := map[string]bool{}
	for _, g := range plan {
		open[g.Name] = g.Open
	}
	for i := range mos {
		mos[i].Open = open[mos[i].Resolution.Group]
	}
	inversions := Inversions(mos)
	td, err := r.teardown(ctx, seq, objs, idx, sc)
	if err != nil {
		return ctrl.Result{}, err
	}

	prev := &wavev1.Sequence{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: ObjectName(seq)}, prev); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if len(plan) == 0 && len(jobs) == 0 && len(objs) == 0 {
		metrics.Forget(seq)
		return ctrl.Result{}, client.IgnoreNotFound(r.deleteSequence(ctx, prev))
	}
	// Opening a group (starting its wait Job's clock, removing its pods' gates) is decided twice:
	// on the cache, then on a consistent read, so that a lagging cache never opens a group early.
	fresh := &freshView{r: r, seq: seq, idx: idx, scope: sc}
	gate := newOpener(plan, func() (map[string]bool, error) { return fresh.plan(ctx) })
	for _, g := range plan {
		// A group whose members are being deleted gets no new wait Job: its revision is not final.
		if g.Open && g.JobName != "" && g.JobState == JobMissing && td.terminating[g.Name] == 0 {
			open, err := gate.Open(g.Name)
			if err != nil {
				return ctrl.Result{}, err
			}
			if open {
				if err := r.createJob(ctx, seq, g); err != nil {
					return ctrl.Result{}, err
				}
			}
		}
	}
	if err := r.deleteStaleJobs(ctx, plan, jobs); err != nil {
		return ctrl.Result{}, err
	}
	gated, err := r.ungate(ctx, seq, gate)
	if err != nil {
		return ctrl.Result{}, err
	}
	observeReleases(plan, jobs, gated, r.now())
	r.emitEvents(plan, prev, objs)
	return ctrl.Result{RequeueAfter: td.requeue}, r.writeStatus(ctx, seq, plan, gated, td, inversions, prev)
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

func (r *Reconciler) waitJobs(ctx context.Context, seq string) ([]batchv1.Job, error) {
	var list batchv1.JobList
	if err := r.Client.List(ctx, &list, client.MatchingLabels{keys.WaitJobLabel: "true", keys.WaitSequenceLabel: seq}); err != nil {
		return nil, fmt.Errorf("listing wait Jobs: %w", err)
	}
	return list.Items, nil
}

func jobStates(jobs []batchv1.Job) JobStates {
	byKey := map[string]*batchv1.Job{}
	for i := range jobs {
		byKey[jobs[i].Namespace+"/"+jobs[i].Name] = &jobs[i]
	}
	return func(ns, name string) JobState {
		j, ok := byKey[ns+"/"+name]
		if !ok {
			return JobMissing
		}
		return StateOf(j)
	}
}

// StateOf reads a wait Job's state from its conditions.
func StateOf(j *batchv1.Job) JobState {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return JobComplete
		case batchv1.JobFailed:
			// The Job's activeDeadlineSeconds is the group's timeout: the Job controller then fails
			// it with DeadlineExceeded. Any other failure is a member that failed for good.
			if c.Reason == batchv1.JobReasonDeadlineExceeded {
				return JobTimedOut
			}
			return JobFailed
		}
	}
	return JobRunning
}

func (r *Reconciler) createJob(ctx context.Context, seq string, g *Group) error {
	job := r.waitJob(seq, g)
	if err := r.Client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating wait Job %s: %w", klog.KObj(job), err)
	}
	ctrl.LoggerFrom(ctx).Info("Created wait Job", "job", klog.KObj(job), "group", g.Name, "revision", g.Revision)
	return nil
}

// waitJob builds the wait Job of a group's current revision.
func (r *Reconciler) waitJob(seq string, g *Group) *batchv1.Job {
	wa := waiter.Args{Sequence: seq, Group: g.Name, Readiness: g.Readiness}
	var owners []metav1.OwnerReference
	for _, m := range g.Members {
		wa.Members = append(wa.Members, waiter.Member{GVR: m.GVR, Namespace: m.Namespace, Name: m.Name})
		if m.Namespace == "" || m.Namespace == g.JobNamespace {
			owners = append(owners, metav1.OwnerReference{APIVersion: m.APIVersion, Kind: m.Kind, Name: m.Name, UID: m.UID})
		}
	}
	args := wa.Encode()
	deadline := int64(g.Timeout.Seconds())
	if deadline < 1 {
		deadline = 1
	}
	// The Job's activeDeadlineSeconds is the only clock: the Job controller then fails the Job
	// with reason DeadlineExceeded, which is how a timeout is told from a failure.
	labels := map[string]string{keys.WaitJobLabel: "true", keys.WaitGroupLabel: g.Name, keys.WaitSequenceLabel: seq, keys.WaitRevisionLabel: g.Revision}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: g.JobName, Namespace: g.JobNamespace, Labels: labels, OwnerReferences: owners,
			Annotations: map[string]string{keys.ArgoCDSyncWaveAnnotation: strconv.Itoa(int(resolve.WaitJobWave(g.Order)))},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](0),
			ActiveDeadlineSeconds: &deadline,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{keys.WaitJobLabel: "true", keys.WaitGroupLabel: g.Name}},
				Spec: corev1.PodSpec{
					ServiceAccountName: WaiterServiceAccount,
					RestartPolicy:      corev1.RestartPolicyNever,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "wait", Image: r.Image, Args: args,
						Resources: corev1.ResourceRequirements{},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
				},
			},
		},
	}
}

func (r *Reconciler) deleteStaleJobs(ctx context.Context, plan []*Group, jobs []batchv1.Job) error {
	current := map[string]bool{}
	for _, g := range plan {
		if g.JobName != "" {
			current[g.JobNamespace+"/"+g.JobName] = true
		}
	}
	for i := range jobs {
		j := &jobs[i]
		if current[j.Namespace+"/"+j.Name] || j.DeletionTimestamp != nil {
			continue
		}
		if err := r.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting stale wait Job %s: %w", klog.KObj(j), err)
		}
	}
	return nil
}

// TemplateToken identifies the pod template a pod was made from: its controller's UID and the
// template hash the controller stamps. Bare pods have none.
func TemplateToken(o metav1.Object) string {
	c := metav1.GetControllerOfNoCopy(o)
	if c == nil {
		return ""
	}
	l := o.GetLabels()
	for _, k := range []string{"pod-template-hash", "controller-revision-hash"} {
		if v, ok := l[k]; ok {
			return string(c.UID) + "/" + v
		}
	}
	return string(c.UID)
}

// ungated is what ungate did: pods still gated per group, and the templates it released.
type ungated struct {
	gated    map[string]int32
	released map[string][]string
}

// ungate removes the gate from the pods of open groups. Before it does, it plans again on a
// consistent read of the members from the API server, so that a lagging cache (an earlier group's
// objects created a moment before the pods) never releases a pod early.
// freshView plans a sequence on a consistent read of its members and wait Jobs from the API
// server: the second opinion of the opener.
type freshView struct {
	r     *Reconciler
	seq   string
	idx   *policy.Index
	scope *scope
}

func (f *freshView) plan(ctx context.Context) (map[string]bool, error) {
	objs, err := f.r.Tracker.FreshMembers(ctx, f.seq, "")
	if err != nil {
		return nil, err
	}
	jobs, err := f.r.waitJobs(ctx, f.seq)
	if err != nil {
		return nil, err
	}
	ms := make([]Member, 0, len(objs))
	for _, o := range objs {
		if !f.scope.optedIn(ctx, nsOf(o.Kind, o)) {
			continue
		}
		if m, ok := toMember(o.Kind, o, f.idx, f.scope.labels(ctx, o.GetNamespace())); ok {
			ms = append(ms, m)
		}
	}
	return openGroups(Plan(f.seq, ms, f.idx, jobStates(jobs), f.r.Namespace)), nil
}

func (r *Reconciler) ungate(ctx context.Context, seq string, gate *opener) (*ungated, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.MatchingFields{PodSequenceIndex: seq}); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	out := &ungated{gated: map[string]int32{}, released: map[string][]string{}}
	gated := out.gated
	var candidates []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if !hasGate(p) || p.DeletionTimestamp != nil {
			continue
		}
		group := p.Labels[keys.GroupLabel]
		if gate.CachedOpen(group) {
			candidates = append(candidates, p)
		} else {
			gated[group]++
		}
	}
	if len(candidates) == 0 {
		return out, nil
	}
	for _, p := range candidates {
		group := p.Labels[keys.GroupLabel]
		open, err := gate.Open(group)
		if err != nil {
			return nil, err
		}
		if !open {
			gated[group]++
			continue
		}
		if err := r.removeGate(ctx, p); err != nil {
			return nil, err
		}
		if t := TemplateToken(p); t != "" {
			out.released[group] = append(out.released[group], t)
		}
	}
	return out, nil
}

// releaseOutside releases what wavegate holds in namespaces that are not (or no longer) opted in:
// the teardown finalizers of members and the scheduling gates of pods.
func (r *Reconciler) releaseOutside(ctx context.Context, seq string, outside []members.Object, sc *scope) error {
	for _, o := range outside {
		if hasFinalizer(o) {
			if err := r.releaseFinalizer(ctx, o, fmt.Sprintf("namespace %s is not opted in (%s)", o.GetNamespace(), keys.EnabledLabel)); err != nil {
				return err
			}
		}
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.MatchingFields{PodSequenceIndex: seq}); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; hasGate(p) && p.DeletionTimestamp == nil && !sc.optedIn(ctx, p.Namespace) {
			if err := r.removeGate(ctx, p); err != nil {
				return err
			}
		}
	}
	return nil
}

func hasGate(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == keys.SchedulingGate {
			return true
		}
	}
	return false
}

// removeGate removes wavegate's gate with a JSON patch that first tests the gate is where it was
// seen, so a concurrent change of the gates makes the patch fail instead of removing another gate.
func (r *Reconciler) removeGate(ctx context.Context, p *corev1.Pod) error {
	for i, g := range p.Spec.SchedulingGates {
		if g.Name != keys.SchedulingGate {
			continue
		}
		at := r.now().UTC().Format(time.RFC3339Nano)
		ops := patch.TestAndRemove("/spec/schedulingGates", i, map[string]string{"name": keys.SchedulingGate})
		if p.Annotations == nil {
			ops = append(ops, patch.Add("/metadata/annotations", map[string]string{keys.ReleasedAtAnnotation: at}))
		} else {
			ops = append(ops, patch.Add(patch.Pointer("/metadata/annotations", keys.ReleasedAtAnnotation), at))
		}
		body, err := patch.Marshal(ops...)
		if err != nil {
			return err
		}
		if err := r.Client.Patch(ctx, p, client.RawPatch(types.JSONPatchType, body), client.FieldOwner(keys.FieldManager)); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("removing the scheduling gate of %s: %w", klog.KObj(p), err)
		}
		return nil
	}
	return nil
}

func (r *Reconciler) emitEvents(plan []*Group, prev *wavev1.Sequence, objs []members.Object) {
	if r.Recorder == nil {
		return
	}
	before := map[string]wavev1.GroupStatus{}
	for _, g := range prev.Status.Groups {
		before[g.Name] = g
	}
	byGroup := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		if g := o.GetLabels()[keys.GroupLabel]; g != "" {
			byGroup[g] = append(byGroup[g], o.Unstructured)
		}
	}
	var blocker *Group
	for _, g := range plan {
		msg := eventMessage(g, blocker)
		if old, ok := before[g.Name]; !ok || old.Message != g.Message || old.Phase != g.Phase || old.Ready != readyCount(blocker) {
			typ, reason := corev1.EventTypeNormal, ReasonWaitingForGroup
			switch g.Phase {
			case wavev1.GroupReleased:
				reason = ReasonGroupReleased
			case wavev1.GroupTimedOut:
				typ, reason = corev1.EventTypeWarning, ReasonGroupTimedOut
			case wavev1.GroupFailed:
				typ, reason = corev1.EventTypeWarning, ReasonGroupFailed
			}
			if typ == corev1.EventTypeWarning && (!ok || old.Phase != g.Phase) {
				metrics.WaitJobFailures.WithLabelValues(string(g.Phase)).Inc()
			}
			// The blocking group's wait Job is the related object: events about different blockers are
			// kept apart by the events API instead of being folded into one series.
			var related runtime.Object
			if b := blocker; b != nil && b.JobName != "" {
				related = &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: b.JobNamespace, Name: b.JobName}}
			} else if g.JobName != "" {
				related = &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: g.JobNamespace, Name: g.JobName}}
			}
			for i, o := range byGroup[g.Name] {
				if i == 10 {
					break // enough to explain; the Sequence has the rest
				}
				r.Recorder.Eventf(o, related, typ, reason, "Order", "%s", msg)
			}
		}
		if blocker == nil && !g.Released {
			blocker = g
		}
	}
}

func readyCount(g *Group) int32 {
	if g == nil {
		return 0
	}
	return countReady(g)
}

func countReady(g *Group) int32 {
	var n int32
	for _, m := range g.Members {
		if m.Ready != nil && m.Ready.Status == readiness.Ready {
			n++
		}
	}
	return n
}

func eventMessage(g, blocker *Group) string {
	if blocker != nil {
		return fmt.Sprintf("group %s waits for group %s: %d/%d members ready", g.Name, blocker.Name, countReady(blocker), len(blocker.Members))
	}
	return fmt.Sprintf("group %s: %s (%d/%d members ready)", g.Name, g.Message, countReady(g), len(g.Members))
}

func (r *Reconciler) writeStatus(ctx context.Context, seq string, plan []*Group, u *ungated, td *teardownResult, inversions []Inversion, prev *wavev1.Sequence) error {
	seqObj := prev
	if prev.Name == "" {
		seqObj = &wavev1.Sequence{ObjectMeta: metav1.ObjectMeta{Name: ObjectName(seq)}, Spec: wavev1.SequenceSpec{Sequence: seq}}
		if err := r.Client.Create(ctx, seqObj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Sequence %s: %w", seqObj.Name, err)
		}
	}
	before := seqObj.DeepCopy()
	cleared := map[string][]string{}
	for _, g := range prev.Status.Groups {
		cleared[g.Name] = g.ClearedTemplates
	}
	var groups []wavev1.GroupStatus
	var summary []string
	allReleased := true
	for _, g := range plan {
		gs := wavev1.GroupStatus{Name: g.Name, Order: g.Order, Revision: g.Revision, Members: int32(len(g.Members)),
			Ready: countReady(g), Phase: g.Phase, Message: g.Message, GatedPods: u.gated[g.Name],
			Terminating: td.terminating[g.Name], Held: td.held[g.Name]}
		if g.JobName != "" && g.JobState != JobMissing {
			gs.WaitJob = g.JobNamespace + "/" + g.JobName
		}
		if g.Open {
			gs.ClearedTemplates = r.clearedTemplates(ctx, seq, g.Name, append(cleared[g.Name], u.released[g.Name]...))
		}
		groups = append(groups, gs)
		summary = append(summary, fmt.Sprintf("%s %d/%d %s", g.Name, gs.Ready, gs.Members, g.Phase))
		allReleased = allReleased && g.Released
	}
	// Groups whose every object is being deleted are no longer planned, but teardown still orders
	// them: they stay in the status (and in what admission reads) until they are gone.
	for name, n := range td.terminating {
		if !slices.ContainsFunc(groups, func(g wavev1.GroupStatus) bool { return g.Name == name }) {
			groups = append(groups, wavev1.GroupStatus{Name: name, Order: terminatingOrder(prev, name), Phase: wavev1.GroupTerminating,
				Terminating: n, Held: td.held[name], Message: "being deleted"})
		}
	}
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].Order < groups[j].Order })
	seqObj.Status.Groups = groups
	waiting, held := 0, int32(0)
	for _, g := range groups {
		metrics.GatedPods.WithLabelValues(seq, g.Name).Set(float64(g.GatedPods))
		if g.Phase != wavev1.GroupReleased {
			waiting++
		}
		held += g.Held
	}
	metrics.GroupsWaiting.WithLabelValues(seq).Set(float64(waiting))
	metrics.TeardownHolds.WithLabelValues(seq).Set(float64(held))
	seqObj.Status.Summary = strings.Join(summary, ", ")
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Released", Message: "every group is released"}
	if !allReleased {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "Waiting", seqObj.Status.Summary
		for _, g := range plan {
			if g.Phase == wavev1.GroupFailed || g.Phase == wavev1.GroupTimedOut && !g.Released {
				cond.Reason, cond.Message = string(g.Phase), fmt.Sprintf("group %s: %s", g.Name, g.Message)
				break
			}
		}
	}
	meta.SetStatusCondition(&seqObj.Status.Conditions, cond)
	holdCond := teardownCondition(td.holds)
	if prevHold := meta.FindStatusCondition(before.Status.Conditions, ConditionTeardownHeld); holdCond.Status == metav1.ConditionTrue &&
		(prevHold == nil || prevHold.Message != holdCond.Message) && r.Recorder != nil {
		// The held objects' namespaces may be terminating and refuse Events: the cluster-scoped
		// Sequence says it.
		r.Recorder.Eventf(seqObj, nil, corev1.EventTypeNormal, ReasonTeardownHeld, "Teardown", "%s", holdCond.Message)
	}
	meta.SetStatusCondition(&seqObj.Status.Conditions, holdCond)
	invCond := inversionCondition(inversions)
	if prevInv := meta.FindStatusCondition(before.Status.Conditions, ConditionDependencyInversion); invCond.Status == metav1.ConditionTrue &&
		(prevInv == nil || prevInv.Message != invCond.Message) && r.Recorder != nil {
		r.Recorder.Eventf(seqObj, nil, corev1.EventTypeWarning, ReasonDependencyInversion, "Order", "%s", invCond.Message)
		for _, inv := range inversions {
			r.event(inv.Member.object(), corev1.EventTypeWarning, ReasonDependencyInversion, "%s", inv.Message())
		}
	}
	meta.SetStatusCondition(&seqObj.Status.Conditions, invCond)
	if err := r.Client.Status().Patch(ctx, seqObj, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("patching the status of Sequence %s: %w", seqObj.Name, err)
	}
	return nil
}

func inversionCondition(inversions []Inversion) metav1.Condition {
	if len(inversions) == 0 {
		return metav1.Condition{Type: ConditionDependencyInversion, Status: metav1.ConditionFalse, Reason: "NoInversion",
			Message: "no member waits on an object of a later group"}
	}
	msgs := make([]string, len(inversions))
	for i, inv := range inversions {
		msgs[i] = inv.Message()
	}
	return metav1.Condition{Type: ConditionDependencyInversion, Status: metav1.ConditionTrue, Reason: ReasonDependencyInversion,
		Message: strings.Join(msgs, "; ")}
}

// ConditionTeardownHeld is True while teardown holds a deleted member of the sequence.
const ConditionTeardownHeld = "TeardownHeld"

func teardownCondition(holds []string) metav1.Condition {
	if len(holds) == 0 {
		return metav1.Condition{Type: ConditionTeardownHeld, Status: metav1.ConditionFalse, Reason: "NothingHeld", Message: "no deleted member is held"}
	}
	holds = slices.Clone(holds)
	sort.Strings(holds)
	return metav1.Condition{Type: ConditionTeardownHeld, Status: metav1.ConditionTrue, Reason: ReasonTeardownHeld, Message: strings.Join(holds, "; ")}
}

// clearedTemplates returns the templates of an open group whose new pods start without a gate:
// those already cleared, plus the templates of its pods that are running without the gate.
func (r *Reconciler) clearedTemplates(ctx context.Context, seq, group string, before []string) []string {
	set := map[string]bool{}
	for _, t := range before {
		set[t] = true
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.MatchingFields{PodSequenceIndex: seq}, client.MatchingLabels{keys.GroupLabel: group}); err == nil {
		for i := range pods.Items {
			if t := TemplateToken(&pods.Items[i]); t != "" && !hasGate(&pods.Items[i]) {
				set[t] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// terminatingOrder is the order a group had in the last status.
func terminatingOrder(prev *wavev1.Sequence, group string) int32 {
	for _, g := range prev.Status.Groups {
		if g.Name == group {
			return g.Order
		}
	}
	return 0
}

func (r *Reconciler) deleteSequence(ctx context.Context, s *wavev1.Sequence) error {
	if s.Name == "" {
		return nil
	}
	return r.Client.Delete(ctx, s)
}

// observeReleases records, for each group whose pods were just ungated, the time since the wait
// Job of the group that released it completed.
func observeReleases(plan []*Group, jobs []batchv1.Job, u *ungated, now time.Time) {
	completed := map[string]time.Time{}
	for _, j := range jobs {
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				completed[j.Namespace+"/"+j.Name] = c.LastTransitionTime.Time
			}
		}
	}
	var last time.Time
	for _, g := range plan {
		if len(u.released[g.Name]) > 0 && !last.IsZero() {
			metrics.ReleaseLatency.Observe(now.Sub(last).Seconds())
		}
		if t, ok := completed[g.JobNamespace+"/"+g.JobName]; ok && t.After(last) {
			last = t
		}
	}
}
