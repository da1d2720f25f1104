package policy

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/readiness"
)

// Condition types and reasons of a WavePolicy.
const (
	ConditionReady = "Ready"
	ReasonAccepted = "Accepted"
	ReasonConflict = "Conflict"
	// ReasonInvalidReadiness: a readiness rule does not compile; the default rules apply instead.
	ReasonInvalidReadiness = "InvalidReadinessRule"
	// ReasonInvalidSelector: the namespace selector does not parse; the policy applies nowhere.
	ReasonInvalidSelector = "InvalidNamespaceSelector"
	// ReasonInvalidGroupLabel: spec.groupLabel is not a label key; no object is grouped by it.
	ReasonInvalidGroupLabel = "InvalidGroupLabel"
)

// maxListedNamespaces bounds status.namespaces; status.namespaceCount counts them all.
const maxListedNamespaces = 100

// StatusReconciler reports on each WavePolicy whether it is in effect: Ready=False with reason
// Conflict when another policy gives one of its groups a different order.
type StatusReconciler struct {
	Client client.Client
}

// SetupWithManager registers the controller. A change to any policy can create or resolve a
// conflict in every other, so each event reconciles all policies.
func (r *StatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list wavev1.WavePolicyList
		if err := r.Client.List(ctx, &list); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, p := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
		}
		return reqs
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("wavepolicy-status").
		For(&wavev1.WavePolicy{}).
		Watches(&wavev1.WavePolicy{}, all).
		// A namespace that opts in, out or changes labels changes where policies apply.
		Watches(&corev1.Namespace{}, all, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(r)
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconcile implements reconcile.Reconciler.
func (r *StatusReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &wavev1.WavePolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var list wavev1.WavePolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing WavePolicies: %w", err)
	}
	var nsList corev1.NamespaceList
	if err := r.Client.List(ctx, &nsList, client.MatchingLabels{keys.EnabledLabel: "true"}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing opted-in namespaces: %w", err)
	}
	idx := Compile(list.Items)
	// Conflicts exist only where two policies apply to the same namespace: look in the view of
	// every opted-in namespace the policy selects (and in the cluster-wide one for policies
	// without a selector).
	seen := map[string]bool{}
	var conflicts, applies []string
	check := func(view *Index) {
		for _, g := range p.Spec.Groups {
			if c := view.Conflict(g.Name); c != "" && !seen[c] {
				seen[c] = true
				conflicts = append(conflicts, c)
			}
		}
	}
	if p.Spec.NamespaceSelector == nil {
		check(idx)
	}
	for _, ns := range nsList.Items {
		if idx.AppliesTo(p.Name, ns.Labels) {
			applies = append(applies, ns.Name)
			check(idx.For(ns.Name, ns.Labels, ns.Name))
		}
	}
	sort.Strings(applies)
	sort.Strings(conflicts)
	cond := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonAccepted,
		Message: fmt.Sprintf("%d groups in effect in %d opted-in namespaces", len(p.Spec.Groups), len(applies)), ObservedGeneration: p.Generation}
	if _, err := metav1.LabelSelectorAsSelector(p.Spec.NamespaceSelector); err != nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonInvalidSelector
		cond.Message = fmt.Sprintf("spec.namespaceSelector: %v: the policy applies to no namespace until it is fixed", err)
	} else if why := InvalidGroupLabel(p.Spec.GroupLabel); p.Spec.GroupLabel != "" && why != "" {
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonInvalidGroupLabel
		cond.Message = fmt.Sprintf("spec.groupLabel: %q is not a label key (%s): no object is grouped by it until it is fixed", p.Spec.GroupLabel, why)
	} else if len(conflicts) > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonConflict
		cond.Message = strings.Join(conflicts, "; ") + ": members of these groups are denied until the policies agree"
	} else if _, err := readiness.NewChecker(p.Spec.Readiness); err != nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonInvalidReadiness
		cond.Message = fmt.Sprintf("spec.%v: fix the expression; until then the waiters of this policy's groups stop on it, "+
			"so those groups are not released and later groups stay gated (then delete their failed wait Jobs)", err)
	}
	before := p.DeepCopy()
	p.Status.ObservedGeneration = p.Generation
	p.Status.NamespaceCount = int32(len(applies))
	p.Status.Namespaces = applies[:min(len(applies), maxListedNamespaces)]
	meta.SetStatusCondition(&p.Status.Conditions, cond)
	if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, fmt.Errorf("patching the status of %s: %w", klog.KObj(p), err)
	}
	return ctrl.Result{}, nil
}
