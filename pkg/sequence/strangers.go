package sequence

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
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

// ReasonOutsideSequence is the Event on a pod whose scheduling gate was removed because its
// namespace may not join the sequence it names.
const ReasonOutsideSequence = "OutsideSequence"

// StrangerReconciler releases the pods that carry wavegate's scheduling gate but name a sequence
// their namespace may not join: a tenant's pod that gated itself and names another namespace's
// sequence, or a pod of a namespace that a policy stopped sharing the sequence with. They are not
// the sequence's pods (sequencePods), so no pass of it releases them, and nothing else would.
//
// It is a controller of its own, one pod per reconcile, so that what a tenant writes costs only
// this queue's time: the passes of the sequence such a pod names are neither woken by it
// (podSequence) nor spend a patch on it. When they released such pods, hundreds of self-gated pods
// naming another namespace's sequence were a patch each inside that sequence's pass, before the
// ungating of its own group.
//
// What a tenant's pods make it do costs requests of its own too: the manager gives it a client with
// a rate limit of its own (Writer, APIReader), so that a flood of such pods never spends the budget
// of the sequences' gate removals.
type StrangerReconciler struct {
	// Client reads from the manager's cache.
	Client client.Client
	// APIReader reads what a release is decided on from the API server: the WavePolicies, and a
	// namespace's labels (the caches can lag either).
	APIReader client.Reader
	// Writer removes the gates (nil: Client).
	Writer   client.Client
	Policies interface{ Index() *policy.Index }
	Recorder events.EventRecorder
	// Namespace is wavegate's own.
	Namespace string
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	policiesChanged chan event.GenericEvent
}

// Reconcile implements reconcile.Reconciler, for one pod.
func (r *StrangerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !mayBeStranger(p) {
		return ctrl.Result{}, nil
	}
	idx := r.Policies.Index()
	if idx == nil {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	// Another replica's webhook may have gated the pod by a policy this manager has not loaded yet
	// (a shared sequence declared in the same apply as the pod): a young pod is judged once that
	// policy has had time to arrive here too.
	age := r.now().Sub(p.CreationTimestamp.Time)
	if age < strangerGrace {
		return ctrl.Result{RequeueAfter: strangerGrace - age}, nil
	}
	seq := members.SequenceOf(p)
	// On the cache first, with no request: a pod that its namespace may join is its sequence's (a
	// change of the namespace's labels or of the policies brings it back here).
	sc := newScope(r.Client, r.Namespace)
	if idx.MayJoin(seq, p.Namespace, sc.Labels(ctx, p.Namespace)) {
		return ctrl.Result{}, nil
	}
	// Released only on the API server's word: the policies (the cache's could pair an old selector
	// with a namespace's new labels, a view that never was) and the namespace's labels.
	if r.APIReader != nil {
		var list wavev1.WavePolicyList
		if err := r.APIReader.List(ctx, &list); err != nil {
			return ctrl.Result{}, fmt.Errorf("reading the WavePolicies, to know whether namespace %s may join sequence %q: %w", p.Namespace, seq, err)
		}
		idx = policy.Compile(list.Items)
	}
	if idx.Shared(seq) {
		sc = sc.withLive(r.APIReader)
		if !sc.refresh(ctx, p.Namespace) {
			return ctrl.Result{}, fmt.Errorf("reading namespace %s, to know whether it may join sequence %q", p.Namespace, seq)
		}
		if idx.MayJoin(seq, p.Namespace, sc.Labels(ctx, p.Namespace)) {
			// The cache lags: it is judged again once the cache agrees either way.
			return ctrl.Result{RequeueAfter: strangerGrace}, nil
		}
	}
	w := r.Writer
	if w == nil {
		w = r.Client
	}
	res, err := removeGateOrRead(ctx, w, r.APIReader, p)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("removing the scheduling gate of %s: %w", klog.KObj(p), err)
	}
	if res != gateRemoved {
		return ctrl.Result{}, nil
	}
	ctrl.LoggerFrom(ctx).Info("Released a pod of a namespace that may not join the sequence it names", "pod", klog.KObj(p), "sequence", seq)
	if r.Recorder != nil {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ReasonOutsideSequence, "Release",
			"namespace %s may not join sequence %q, so wavegate does not order this pod and removed its scheduling gate %s: "+
				"name a sequence of the namespace (%s or %s.<name>) in the label %s, or ask a platform team to share the sequence with it",
			p.Namespace, seq, keys.SchedulingGate, p.Namespace, p.Namespace, keys.SequenceLabel)
	}
	return ctrl.Result{}, nil
}

// strangerGrace: a pod is released as a stranger once it is this old by its creationTimestamp
// (whole seconds: 3-4 s after its creation). Another replica may have admitted it by a policy
// this manager has not loaded yet.
const strangerGrace = 4 * time.Second

func (r *StrangerReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// mayBeStranger: a pod, not being deleted, with wavegate's gate, that names a sequence other than
// its namespace's own (only a policy can let it join such a sequence).
func mayBeStranger(p *corev1.Pod) bool {
	return HasGate(p) && p.DeletionTimestamp == nil && !policy.OwnSequence(members.SequenceOf(p), p.Namespace)
}

// strangerEvents passes a pod's creation as a candidate, and of its updates only those that make
// it one or change its labels (not the scheduler's SchedulingGated condition): what else decides
// (the namespace's labels, the policies) has watches of its own.
var strangerEvents = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return candidate(e.Object) },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(e event.GenericEvent) bool { return candidate(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return candidate(e.ObjectNew) && (!candidate(e.ObjectOld) || !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()))
	},
}

func candidate(o client.Object) bool {
	p, ok := o.(*corev1.Pod)
	return ok && mayBeStranger(p)
}

// PoliciesChanged reconciles every pod that may be a stranger (it does not block): call it once
// the policies are recompiled, as a shared sequence's declaration may have stopped selecting a
// namespace.
func (r *StrangerReconciler) PoliciesChanged() {
	select {
	case r.policiesChanged <- event.GenericEvent{}:
	default: // one is pending already, and lists the pods when it is handled
	}
}

// SetupWithManager registers the controller: gated pods that name another namespace's sequence,
// all of them again when the policies change, and those of a namespace whose labels change.
func (r *StrangerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.policiesChanged = make(chan event.GenericEvent, 1)
	candidates := func(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
		var out []reconcile.Request
		for _, p := range cachedGatedPods(ctx, r.Client, opts...) {
			if mayBeStranger(p) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
			}
		}
		return out
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("stranger-pods").
		// As many at once as sequences: a tenant's flood of such pods is worked off beside the
		// pods of a namespace that a policy stopped sharing a sequence with, not before them.
		WithOptions(controller.Options{MaxConcurrentReconciles: sequenceWorkers}).
		For(&corev1.Pod{}, builder.WithPredicates(strangerEvents)).
		WatchesRawSource(source.Channel(r.policiesChanged, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			return candidates(ctx)
		}))).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return candidates(ctx, client.InNamespace(o.GetName()))
		}), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(r)
}
