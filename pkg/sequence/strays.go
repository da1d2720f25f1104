package sequence

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

// StrayReconciler deletes the Sequence objects that ObjectName does not name for the sequence
// they record: those an earlier version named otherwise (before a valid name shaped like a hashed
// one was hashed too, and dots were kept in hashed names). Nothing reads such an object
// (ownObject), and no pass of its sequence, which reports on the object it names now, would ever
// delete it.
type StrayReconciler struct {
	Client client.Client
}

// Reconcile implements reconcile.Reconciler.
func (r *StrayReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &wavev1.Sequence{}
	if err := r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ownObject(s) || s.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleting a stray Sequence", "sequenceObject", klog.KObj(s), "sequence", s.Spec.Sequence,
		"reason", fmt.Sprintf("the sequence reports on %s now", ObjectName(s.Spec.Sequence)))
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID}))
}

// SetupWithManager registers the controller, for stray Sequence objects only.
func (r *StrayReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sequence-strays").
		For(&wavev1.Sequence{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			s, ok := o.(*wavev1.Sequence)
			return ok && !ownObject(s)
		}))).
		Complete(r)
}
