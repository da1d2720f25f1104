package sequence

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"wavegate.io/wavegate/pkg/keys"
)

// TestGatedPodEvents: a pass runs for a gated pod's creation, deletion and label changes, and for
// any update of a pod being deleted; not for the rest of a gated pod's updates (the scheduler's
// conditions), nor for pods without wavegate's gate.
func TestGatedPodEvents(t *testing.T) {
	pod := func(gated bool, labels map[string]string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", Labels: labels}}
		if gated {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: keys.SchedulingGate}}
		}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	web := map[string]string{keys.GroupLabel: "web"}
	db := map[string]string{keys.GroupLabel: "db"}
	scheduled := pod(true, web, false)
	scheduled.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "SchedulingGated"}}
	updates := []struct {
		name     string
		old, new *corev1.Pod
		want     bool
	}{
		{"the scheduler's SchedulingGated condition", pod(true, web, false), scheduled, false},
		{"a gated pod's group label changed", pod(true, web, false), pod(true, db, false), true},
		{"a gated pod being deleted", pod(true, web, false), pod(true, web, true), true},
		{"a pod being deleted, its gate gone", pod(false, web, true), pod(false, web, true), true},
		{"the gate removed", pod(true, web, false), pod(false, web, false), false},
		{"a pod never gated", pod(false, web, false), pod(false, db, false), false},
	}
	for _, u := range updates {
		if got := gatedPodEvents.Update(event.UpdateEvent{ObjectOld: u.old, ObjectNew: u.new}); got != u.want {
			t.Errorf("update, %s: %t, want %t", u.name, got, u.want)
		}
	}
	if !gatedPodEvents.Create(event.CreateEvent{Object: pod(true, web, false)}) {
		t.Errorf("a gated pod created: no pass, want one")
	}
	if gatedPodEvents.Create(event.CreateEvent{Object: pod(false, web, false)}) {
		t.Errorf("a pod created without the gate: a pass, want none")
	}
	if !gatedPodEvents.Delete(event.DeleteEvent{Object: pod(true, web, false)}) {
		t.Errorf("a gated pod deleted: no pass, want one")
	}
}
