package sequence

import (
	"context"
	"fmt"
	"maps"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
)

// IndexPods registers the pod index the controller lists by.
func IndexPods(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, PodSequenceIndex, func(o client.Object) []string {
		if _, ok := o.GetLabels()[keys.GroupLabel]; !ok {
			return nil
		}
		return []string{members.SequenceOf(o)}
	}); err != nil {
		return fmt.Errorf("failed creating index %s: %w", PodSequenceIndex, err)
	}
	return nil
}

// trackerSource feeds the tracker's changes into the controller's queue.
type trackerSource struct {
	tracker *members.Tracker
	mu      sync.Mutex
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
}

func (s *trackerSource) onChange(seq string) {
	s.mu.Lock()
	q := s.queue
	s.mu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKey{Name: seq}})
	}
}

func (s *trackerSource) start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.mu.Lock()
	s.queue = q
	s.mu.Unlock()
	return nil
}

// PoliciesChanged reconciles every sequence (it does not block): call it once the policies are
// recompiled. The WavePolicy watch may run its passes before that, on the old index, and a
// change that moves nothing else (a timeout) would then wait for an unrelated event.
func (r *Reconciler) PoliciesChanged() {
	// It lists every cached Sequence and pod: not in the caller's event handler, and once for a
	// burst of changes (one pending lists what holds when it runs).
	if r.policiesChanged == nil || r.policiesPending.Swap(true) {
		return
	}
	go func() {
		r.policiesPending.Store(false)
		r.policiesChanged()
	}()
}

// sequenceWorkers is how many sequences are reconciled at once.
const sequenceWorkers = 4

// SetupWithManager registers the controller. Besides member changes from the tracker it watches
// wait Jobs, gated pods and its own Sequence objects; a policy change reconciles every sequence.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	src := &trackerSource{tracker: r.Tracker}
	r.Tracker.OnChange = src.onChange
	bySequenceLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if s, ok := o.GetLabels()[keys.WaitSequenceLabel]; ok {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: s}}}
		}
		return nil
	})
	byPodSequence := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		if seq, ok := podSequence(r.Policies.Index(), o, newScope(r.Client, r.Namespace).Labels(ctx, o.GetNamespace())); ok {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: seq}}}
		}
		return nil
	})
	bySequence := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.(*wavev1.Sequence).Spec.Sequence}}}
	})
	sequencesOf := func(ctx context.Context) []reconcile.Request {
		var list wavev1.SequenceList
		if err := r.Client.List(ctx, &list); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, s := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: s.Spec.Sequence}})
		}
		return out
	}
	allSequences := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		return sequencesOf(ctx)
	})
	r.policiesChanged = func() {
		ctx := context.Background()
		for _, req := range sequencesOf(ctx) {
			src.onChange(req.Name)
		}
		// And the sequences gated pods name: a pod whose events podSequence dropped on the old
		// policies may be a sequence's now, one with no Sequence object yet.
		for _, req := range gatedPodsSequences(ctx, r.Client) {
			src.onChange(req.Name)
		}
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.WaitPods != nil {
		// A wait-Job pod that succeeded releases the next group without waiting for the Job
		// controller to mark the Job Complete.
		b = b.WatchesRawSource(source.Kind(r.WaitPods, &corev1.Pod{}, handler.TypedEnqueueRequestsFromMapFunc(
			func(_ context.Context, p *corev1.Pod) []reconcile.Request {
				if s, ok := p.Labels[keys.WaitSequenceLabel]; ok && p.Status.Phase == corev1.PodSucceeded {
					return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: s}}}
				}
				return nil
			})))
	}
	return b.
		Named("sequence").
		// Sequences are independent (a key is never reconciled twice at once, and what passes share
		// is locked): one whose pass is slow (a consistent read of many objects, a hundred gate
		// removals, a LIST that hangs until its timeout) does not hold every other tenant's
		// boundaries behind it.
		WithOptions(controller.Options{MaxConcurrentReconciles: sequenceWorkers}).
		WatchesRawSource(source.TypedFunc[reconcile.Request](src.start)).
		Watches(&batchv1.Job{}, bySequenceLabel).
		Watches(&corev1.Pod{}, byPodSequence, builder.WithPredicates(gatedPodEvents)).
		Watches(&wavev1.Sequence{}, bySequence, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&wavev1.WavePolicy{}, allSequences).
		// A namespace that opts in or out, or whose labels change what policies and shared sequences
		// select, changes what wavegate acts on: its own sequences and every reported one.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			reqs := sequencesOf(ctx)
			for _, s := range r.Tracker.SequencesIn(o.GetName()) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: s}})
			}
			// And the shared sequences its gated pods name: one the namespace may join now has pods
			// whose events podSequence dropped before, and may have no Sequence or member yet.
			return append(reqs, gatedPodsSequences(ctx, r.Client, client.InNamespace(o.GetName()))...)
		}), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(r)
}

// podSequence returns the sequence whose pass a pod's events wake: the one it names, if its
// namespace may join it (its own, or a shared one whose declaration selects the namespace's
// labels, as the cache shows them). A pod that names a sequence its namespace may not join is never
// that sequence's (sequencePods) and wakes none of its passes: a tenant's pods must not keep another
// namespace's sequence busy (StrangerReconciler releases them). Should the cache lag a label that
// lets the namespace join, the label's change wakes the sequences its gated pods name. Before the
// policies are loaded (idx nil) every pod wakes the sequence it names.
func podSequence(idx *policy.Index, o client.Object, nsLabels map[string]string) (string, bool) {
	seq := members.SequenceOf(o)
	return seq, idx == nil || idx.MayJoin(seq, o.GetNamespace(), nsLabels)
}

// gatedPodsSequences returns the sequences that the cached gated pods name (opts narrow the list).
func gatedPodsSequences(ctx context.Context, c client.Reader, opts ...client.ListOption) []reconcile.Request {
	seen := map[string]bool{}
	var out []reconcile.Request
	for _, p := range cachedGatedPods(ctx, c, opts...) {
		if seq := members.SequenceOf(p); !seen[seq] {
			seen[seq] = true
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: seq}})
		}
	}
	return out
}

// cachedGatedPods lists the cached pods that carry wavegate's gate (opts narrow the list), without
// copying them: they are only read. A failure is logged and lists none: it is called from event
// handlers, which cannot retry.
func cachedGatedPods(ctx context.Context, c client.Reader, opts ...client.ListOption) []*corev1.Pod {
	var list corev1.PodList
	if err := c.List(ctx, &list, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the cached pods that carry wavegate's scheduling gate")
		return nil
	}
	var out []*corev1.Pod
	for i := range list.Items {
		if p := &list.Items[i]; HasGate(p) {
			out = append(out, p)
		}
	}
	return out
}

// watchedPod is a pod whose events may change what a pass decides: one with wavegate's gate, or
// one being deleted.
func watchedPod(o client.Object) bool {
	p, ok := o.(*corev1.Pod)
	return ok && (HasGate(p) || p.DeletionTimestamp != nil)
}

// gatedPodEvents passes the events of watched pods that a pass decides on. Of a gated pod's
// updates, only those of its labels (its sequence and group) and its deletion: the scheduler's
// SchedulingGated condition on each of a hundred gated pods would otherwise cost a pass each while
// they are being created. A gate removed is its remover's doing (the pass that released it).
var gatedPodEvents = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return watchedPod(e.Object) },
	DeleteFunc:  func(e event.DeleteEvent) bool { return watchedPod(e.Object) },
	GenericFunc: func(e event.GenericEvent) bool { return watchedPod(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		if !watchedPod(e.ObjectNew) {
			return false
		}
		return e.ObjectNew.GetDeletionTimestamp() != nil || !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
	},
}
