package sequence

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// RemoveGate lets the tests against a real API server (package sequence_test) remove a pod's gate
// as the controller does.
func (r *Reconciler) RemoveGate(ctx context.Context, p *corev1.Pod) error {
	return r.removeGate(ctx, p)
}

// DisarmJob lets them remove a wait Job's deadline as the controller does when its group closes.
func (r *Reconciler) DisarmJob(ctx context.Context, j *batchv1.Job, group string) error {
	return r.disarmJob(ctx, j, &Group{Name: group})
}
