package sequence

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// RemoveGate lets the tests against a real API server (package sequence_test) remove a pod's gate
// as the controller does.
func (r *Reconciler) RemoveGate(ctx context.Context, p *corev1.Pod) error {
	return r.removeGate(ctx, p)
}
