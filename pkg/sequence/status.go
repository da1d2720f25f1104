package sequence

// The Sequence status: groups, conditions, cleared templates, metrics.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/metrics"
	"wavegate.io/wavegate/pkg/teardown"
)

// writeStatus writes the Sequence's status. A status that only counts gated pods or ready members
// differently is written at most once per statusCountsPeriod: a ReplicaSet creating a hundred pods
// would otherwise cost a write per reconcile, on the API server that is creating and releasing
// those pods. It returns when to reconcile again to write such a status. settle is what the settle holds
// the groups closed for (its Changing is zero when it does not).
func (r *Reconciler) writeStatus(ctx context.Context, seq string, plan []*Group, refused map[string]time.Time, u *ungated, td *teardown.Result, inversions []Inversion, settle hold, prev *wavev1.Sequence) (time.Duration, error) {
	seqObj := prev
	if prev.Name == "" {
		seqObj = &wavev1.Sequence{ObjectMeta: metav1.ObjectMeta{Name: ObjectName(seq)}, Spec: wavev1.SequenceSpec{Sequence: seq}}
		if err := r.Client.Create(ctx, seqObj); err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("creating Sequence %s: %w", seqObj.Name, err)
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
			Terminating: td.Terminating[g.Name], Held: td.Held[g.Name], Owned: td.Owned[g.Name], Resources: td.Resources[g.Name]}
		if g.JobName != "" && g.JobState != JobMissing {
			gs.WaitJob = jobKey(g)
		}
		if since, ok := refused[jobKey(g)]; ok && g.JobRefused {
			gs.WaitJob, gs.WaitJobRefusedSince = jobKey(g), &metav1.Time{Time: since}
		}
		if g.Open {
			gs.ClearedTemplates = clearedTemplates(cleared[g.Name], u.released[g.Name], u.running[g.Name], u.templates[g.Name])
		}
		waits := ""
		if req := u.requires[g.Name]; req != "" {
			// The group is open, but not for pods whose own namespace's policy requires more.
			waits = fmt.Sprintf("some of its pods wait for group %s, which their namespace's policy requires and which has no members yet", req)
			gs.Message += "; " + waits
		}
		groups = append(groups, gs)
		line := fmt.Sprintf("%s %d/%d %s", g.Name, gs.Ready, gs.Members, g.Phase)
		if waits != "" {
			line += " (" + waits + ")"
		}
		summary = append(summary, line)
		allReleased = allReleased && g.Released && waits == ""
	}
	// Groups whose every member is being deleted, or that have only objects a controller made
	// (holds), are no longer planned, but teardown still orders them: they stay in the status (and
	// in what admission and the DELETE check read) until they are gone.
	for _, name := range slices.Sorted(maps.Keys(td.Orders)) {
		if td.Terminating[name]+td.Owned[name] == 0 || slices.ContainsFunc(groups, func(g wavev1.GroupStatus) bool { return g.Name == name }) {
			continue
		}
		gs := wavev1.GroupStatus{Name: name, Order: td.Orders[name], Phase: wavev1.GroupTerminating,
			Terminating: td.Terminating[name], Owned: td.Owned[name], Held: td.Held[name], Resources: td.Resources[name], Message: "being deleted"}
		if gs.Terminating == 0 {
			gs.Phase, gs.Message = wavev1.GroupPending, "no members of its own; objects a controller made carry a finalizer and hold the groups before it"
		}
		groups = append(groups, gs)
	}
	// Groups of gated pods that no tracked member has (a bare pod, an untracked controller's) are
	// not planned either: they are reported while their pods wait, and are not released until then.
	for _, name := range slices.Sorted(maps.Keys(u.podsOnly)) {
		if i := slices.IndexFunc(groups, func(g wavev1.GroupStatus) bool { return g.Name == name }); i >= 0 {
			groups[i].GatedPods = u.gated[name]
			continue
		}
		pg := u.podsOnly[name]
		gs := wavev1.GroupStatus{Name: name, Order: pg.order, Phase: wavev1.GroupPending, GatedPods: u.gated[name],
			Message: podsOnlyMessage(plan, name, pg)}
		groups = append(groups, gs)
		summary = append(summary, fmt.Sprintf("%s %d/%d %s", name, gs.Ready, gs.Members, gs.Phase))
		allReleased = false
	}
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].Order < groups[j].Order })
	seqObj.Status.Groups = groups
	waiting, held := 0, int32(0)
	for _, g := range groups {
		metrics.GatedPods.WithLabelValues(seq, g.Name).Set(float64(g.GatedPods))
		if g.Phase != wavev1.GroupReleased || u.requires[g.Name] != "" {
			waiting++
		}
		held += g.Held
	}
	for _, g := range before.Status.Groups {
		if !slices.ContainsFunc(groups, func(cur wavev1.GroupStatus) bool { return cur.Name == g.Name }) {
			// A group no longer reported (its pods released, its members gone) counts no gated pod.
			metrics.GatedPods.DeleteLabelValues(seq, g.Name)
		}
	}
	metrics.GroupsWaiting.WithLabelValues(seq).Set(float64(waiting))
	metrics.TeardownHolds.WithLabelValues(seq).Set(float64(held))
	seqObj.Status.Summary = strings.Join(summary, ", ")
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Released", Message: "every group is released"}
	if !allReleased {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "Waiting", seqObj.Status.Summary
		if settle.Changing >= settleReported {
			cond.Reason, cond.Message = ReasonSettling, fmt.Sprintf("the members are changing (added, removed or changed "+
				"in generation: an apply still creating them, or members that keep changing): no group opens until they "+
				"have stayed the same for %s, or %s after the changes began", settle.Settle.Round(time.Millisecond), r.settleMax())
		}
		for _, g := range plan {
			if g.Phase == wavev1.GroupFailed || g.Phase == wavev1.GroupTimedOut && !g.Released {
				cond.Reason, cond.Message = string(g.Phase), fmt.Sprintf("group %s: %s", g.Name, g.Message)
				break
			}
		}
	}
	meta.SetStatusCondition(&seqObj.Status.Conditions, cond)
	holdCond := teardown.Condition(td.Holds)
	if prevHold := meta.FindStatusCondition(before.Status.Conditions, teardown.ConditionHeld); holdCond.Status == metav1.ConditionTrue &&
		(prevHold == nil || prevHold.Message != holdCond.Message) && r.Recorder != nil {
		// The held objects' namespaces may be terminating and refuse Events: the cluster-scoped
		// Sequence says it.
		r.Recorder.Eventf(seqObj, nil, corev1.EventTypeNormal, teardown.ReasonTeardownHeld, "Teardown", "%s", holdCond.Message)
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
	switch now := r.now(); {
	case prev.Name != "" && equality.Semantic.DeepEqual(before.Status, seqObj.Status):
		return 0, nil
	case prev.Name != "" && equality.Semantic.DeepEqual(withoutCounts(before.Status), withoutCounts(seqObj.Status)):
		if wait := r.statusWrites.wait(seq, now); wait > 0 {
			return wait, nil
		}
	}
	if err := r.Client.Status().Patch(ctx, seqObj, client.MergeFrom(before)); err != nil {
		return 0, fmt.Errorf("patching the status of Sequence %s: %w", seqObj.Name, err)
	}
	r.statusWrites.wrote(seq, r.now())
	return 0, nil
}

// withoutCounts is a status without its counts of gated pods and ready members, and without the
// summary that repeats them (also the Ready condition's message while the sequence waits). A
// member becoming ready is what its waiter marks a moment later: the status written then, beside
// the release, has the new count. Written on its own, it held up the reconcile of that mark by the
// length of a status write (14-33 ms on the local cluster).
func withoutCounts(s wavev1.SequenceStatus) wavev1.SequenceStatus {
	s.Groups = slices.Clone(s.Groups)
	for i := range s.Groups {
		s.Groups[i].GatedPods, s.Groups[i].Ready = 0, 0
	}
	s.Summary = ""
	s.Conditions = slices.Clone(s.Conditions)
	for i, c := range s.Conditions {
		if c.Type == "Ready" && c.Reason == "Waiting" {
			s.Conditions[i].Message = ""
		}
	}
	return s
}

// statusCountsPeriod is how often at most a status that only counts gated pods or ready members
// differently is written.
const statusCountsPeriod = time.Second

// statusWrites remembers when each sequence's status was last written (a restarted manager
// writes at once).
type statusWrites struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// wait returns how long to wait before writing the counts of a sequence again.
func (w *statusWrites) wait(seq string, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, ok := w.last[seq]; ok && now.Sub(t) < statusCountsPeriod {
		return statusCountsPeriod - now.Sub(t)
	}
	return 0
}

func (w *statusWrites) wrote(seq string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last = map[string]time.Time{}
	}
	w.last[seq] = now
}

func (w *statusWrites) forget(seq string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.last, seq)
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

// clearedTemplates returns the templates of an open group whose new pods start without a gate:
// those released now, those of its pods that run without the gate, and of those cleared before,
// the ones the sequence still has pods of (present: its cached pods of the group, gated or not,
// being deleted or not).
//
// A template whose pods are all gone is no longer cleared. Admission trusts the status: a workload
// brought back to such a template (a Deployment rolled back to an old ReplicaSet, `helm rollback`
// of an earlier group and this one together) would otherwise start its pods ungated in the moment
// before the controller sees that the earlier group changed and closes this group. A template
// released a moment ago stays cleared while its workload creates the rest of its pods: the pods
// that pass released are in the cache. A cache behind a new pod of a template whose other pods
// are gone only prunes early: that pod is gated, and released by the next pass if its group is
// open.
//
// A template token is a controller's UID and its template hash (TemplateToken). Pods an operator
// creates directly carry no template hash: their token is the operator's object's UID alone, and
// stands for every pod it makes in the group. Pruning forgets it once none of those pods is left,
// but not while one is, even if the operator's new pods differ from the released ones. Bare pods
// have no token and are never cleared.
func clearedTemplates(cleared, released, running, present []string) []string {
	var out []string
	out = append(out, released...)
	out = append(out, running...)
	for _, t := range cleared {
		if slices.Contains(present, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// podsOnlyMessage says what the gated pods of a group without members wait for: the latest group of
// the plan before theirs that is not released (as a planned group names it), or a group their
// policy requires that has no members yet.
func podsOnlyMessage(plan []*Group, name string, pg podGroup) string {
	const what = "no tracked member (pods are not members)"
	switch until, required := openGroups(plan).waitsFor(name, pg); {
	case until != "":
		// Named as a planned group at its place names what it waits for (Plan).
		return fmt.Sprintf("%s; its pods wait for group %s", what, waitsForAt(plan, pg.order, name))
	case required != "":
		return fmt.Sprintf("%s; its pods wait for group %s, which is required and has no members yet", what, required)
	}
	return what + "; its pods wait for the members to settle"
}

func (r *Reconciler) deleteSequence(ctx context.Context, s *wavev1.Sequence) error {
	if s.Name == "" {
		return nil
	}
	return r.Client.Delete(ctx, s)
}

// observeReleases records, for each group whose pods were just ungated, the time since the
// earlier group was done: its waiter's exit (the evidence the release acts on) or, without it, the
// wait Job's Complete condition.
func observeReleases(plan []*Group, jobs []batchv1.Job, succeeded map[types.UID]time.Time, u *ungated, now time.Time) {
	done := map[string]time.Time{}
	for _, j := range jobs {
		t := succeeded[j.UID]
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue && (t.IsZero() || c.LastTransitionTime.Time.Before(t)) {
				t = c.LastTransitionTime.Time
			}
		}
		if !t.IsZero() {
			done[j.Namespace+"/"+j.Name] = t
		}
	}
	var last time.Time
	for _, g := range plan {
		if len(u.released[g.Name]) > 0 && !last.IsZero() {
			metrics.ReleaseLatency.Observe(now.Sub(last).Seconds())
		}
		if t, ok := done[g.JobNamespace+"/"+g.JobName]; ok && t.After(last) {
			last = t
		}
	}
}
