package sequence

// Events on the members of waiting groups.

import (
	"fmt"
	"strings"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/metrics"
	"wavegate.io/wavegate/pkg/readiness"
)

// emitEvents records an Event on up to ten members of each group whose phase, status message or
// blocking group changed since the last Event about it (what this manager last emitted for the
// group, or, after a restart, the phase and message in the Sequence's status). A change of ready
// counts alone sends none: the Event says them as they were, and the Sequence's status and the
// wait Job's log follow them. An Event per count sent one per member that became ready, to up to
// ten members of every later group: hundreds of Events for a group of a few dozen members.
//
// The Events go to the sequence's members (mos), by the group they resolved to: not to every
// object that names the sequence (one in a namespace that may not join it would be told of the
// sequence's groups, and take the Events its members should have), and not only to those grouped
// by wavegate.io/group (a policy's group label groups members too).
func (r *Reconciler) emitEvents(seq string, plan []*Group, prev *wavev1.Sequence, mos []memberObject) {
	if r.Recorder == nil {
		return
	}
	before := map[string]wavev1.GroupStatus{}
	for _, g := range prev.Status.Groups {
		before[g.Name] = g
	}
	byGroup := map[string][]*unstructured.Unstructured{}
	for _, mo := range mos {
		byGroup[mo.Resolution.Group] = append(byGroup[mo.Resolution.Group], mo.Object)
	}
	byName := make(map[string]*Group, len(plan))
	for _, g := range plan {
		byName[g.Name] = g
	}
	for _, g := range plan {
		// A group that is not open names the group it waits for directly (Plan), as its message does.
		var blocker *Group
		if !g.Open {
			blocker = byName[g.WaitsFor]
		}
		msg := eventMessage(g, blocker)
		sig := string(g.Phase) + "\x00" + g.Message
		if blocker != nil {
			sig += "\x00" + blocker.Name
		}
		last, known := r.emitted.last(seq, g.Name)
		old, inStatus := before[g.Name]
		if known && last != sig || !known && (!inStatus || old.Message != g.Message || old.Phase != g.Phase) {
			r.emitted.set(seq, g.Name, sig)
			typ, reason := corev1.EventTypeNormal, ReasonWaitingForGroup
			switch g.Phase {
			case wavev1.GroupReleased:
				reason = ReasonGroupReleased
			case wavev1.GroupTimedOut:
				typ, reason = corev1.EventTypeWarning, ReasonGroupTimedOut
			case wavev1.GroupFailed:
				typ, reason = corev1.EventTypeWarning, ReasonGroupFailed
			}
			lastPhase, _, _ := strings.Cut(last, "\x00")
			if phaseChanged := known && lastPhase != string(g.Phase) || !known && (!inStatus || old.Phase != g.Phase); typ == corev1.EventTypeWarning && phaseChanged {
				metrics.WaitJobFailures.WithLabelValues(string(g.Phase)).Inc()
			}
			// The blocking group's wait Job is the related object: events about different blockers are
			// kept apart by the events API instead of being folded into one series (its series key is
			// the type, reason, action, reporter, regarding and related objects, not the note). A
			// pending blocker's Job is named before it exists: the name of its revision's Job, which
			// is created when that group opens.
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
	}
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

// emittedEvents remembers, per sequence and group, the phase and message of the last Event: the
// Sequence in the cache can be older than the status the previous reconcile wrote, and comparing
// with it sent the same Event on every reconcile of a busy sequence (32 GroupReleased Events in
// one run of a hundred pods). Like the status-write clock it is only an optimization.
type emittedEvents struct {
	mu   sync.Mutex
	sigs map[string]map[string]string
}

func (e *emittedEvents) last(seq, group string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sigs[seq][group]
	return s, ok
}

func (e *emittedEvents) set(seq, group, sig string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sigs == nil {
		e.sigs = map[string]map[string]string{}
	}
	if e.sigs[seq] == nil {
		e.sigs[seq] = map[string]string{}
	}
	e.sigs[seq][group] = sig
}

func (e *emittedEvents) forget(seq string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.sigs, seq)
}
