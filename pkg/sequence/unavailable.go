package sequence

// Sequences with members of a kind the member tracker cannot see in full are not planned.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/members"
)

// ReasonKindUnavailable is the reason of the Sequence's Ready condition, and of its Warning Event,
// while the sequence is not planned because a kind of its members is unavailable.
const ReasonKindUnavailable = "KindUnavailable"

// unavailableRecheck is how often a sequence that is not planned looks again: a kind that comes
// back (access granted again, its API service up) may bring no event of its members.
const unavailableRecheck = 5 * time.Second

// unavailableKinds says which kinds that the sequence's status records for its groups (written
// from the members of the last plan, and the objects being deleted) the tracker cannot see in full
// now, and why; "" when it can see them all. why is members.Tracker.WhyUnavailable.
//
// The status is what tells which kinds a sequence has members of while the tracker cannot see
// them: a sequence whose status never recorded the kind (its Sequence was created, or its first
// member of the kind came, while the kind was already unavailable) is planned on what the tracker
// sees. The versions are left out: a kind whose preferred version changed is the same kind.
func unavailableKinds(prev *wavev1.Sequence, why func([]schema.GroupResource) map[schema.GroupResource]string) string {
	groups := map[schema.GroupResource][]string{}
	for _, g := range prev.Status.Groups {
		for _, s := range g.Resources {
			gvr, err := members.ParseResource(s)
			if err != nil {
				continue
			}
			if gr := gvr.GroupResource(); !slices.Contains(groups[gr], g.Name) {
				groups[gr] = append(groups[gr], g.Name)
			}
		}
	}
	if len(groups) == 0 {
		return ""
	}
	unavailable := why(slices.Collect(maps.Keys(groups)))
	if len(unavailable) == 0 {
		return ""
	}
	var parts []string
	for _, gr := range slices.SortedFunc(maps.Keys(unavailable), func(a, b schema.GroupResource) int {
		return strings.Compare(a.String(), b.String())
	}) {
		parts = append(parts, fmt.Sprintf("%s (group %s): %s", gr, strings.Join(groups[gr], ", "), unavailable[gr]))
	}
	return "wavegate cannot see every member of this sequence, so no group opens and no deleted member is released until it can: " +
		strings.Join(parts, "; ")
}

// frozen reports a sequence that is not planned: its Ready condition says why, and a Warning Event
// on the Sequence says it once per change. Its gated pods stay gated, its wait Jobs stay as they
// are, its deleted members stay held, and its status keeps the groups and resources it recorded
// (what keeps it frozen until the kind is back). No template stays cleared: admission gates every
// new pod of the sequence, as the controller cannot tell whether an earlier group changed (an
// upgrade of the kind it cannot see); the pods go when the sequence is planned again.
func (r *Reconciler) frozen(ctx context.Context, prev *wavev1.Sequence, msg string) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	before := prev.DeepCopy()
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: ReasonKindUnavailable, Message: msg}
	if cur := meta.FindStatusCondition(before.Status.Conditions, cond.Type); cur == nil || cur.Reason != cond.Reason || cur.Message != cond.Message {
		log.Info("Not planning the sequence: a kind of its members is unavailable", "reason", msg)
		if r.Recorder != nil {
			r.Recorder.Eventf(prev, nil, corev1.EventTypeWarning, ReasonKindUnavailable, "Order", "%s", msg)
		}
	} else {
		log.V(1).Info("Still not planning the sequence: a kind of its members is unavailable")
	}
	meta.SetStatusCondition(&prev.Status.Conditions, cond)
	// Nor what a plan would keep: whether a group with a refused wait Job stays open is not known
	// while the sequence is frozen, so its clock starts again afterwards (it errs long).
	r.refusals.keepOnly(prev.Spec.Sequence, nil, prev, r.now())
	for i := range prev.Status.Groups {
		prev.Status.Groups[i].ClearedTemplates = nil
		prev.Status.Groups[i].WaitJobRefusedSince = nil
	}
	if equality.Semantic.DeepEqual(before.Status, prev.Status) {
		return ctrl.Result{RequeueAfter: unavailableRecheck}, nil
	}
	if err := r.Client.Status().Patch(ctx, prev, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, fmt.Errorf("patching the status of Sequence %s: %w", prev.Name, err)
	}
	return ctrl.Result{RequeueAfter: unavailableRecheck}, nil
}
