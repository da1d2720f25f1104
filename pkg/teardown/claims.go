package teardown

// Claims and the pods that mount them, in a namespace being deleted.

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/resolve"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=delete

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// freeLaterClaims deletes, in a namespace being deleted, the pods that keep a claim of the
// sequence that is being deleted there, when the DELETE check would let the namespace controller
// delete them (Check.Refuse): a pod whose place (its group's order, the earliest group's for a pod
// in no group) comes before one of those claims' groups (mountsLater), or after which nothing of
// the sequence is left. The claim's pvc-protection finalizer waits for such a pod, but the
// namespace controller deletes pods as one collection in name order and stops at its first refusal:
// a held pod whose name comes first keeps it from ever asking, and the claim, the groups before it
// and the namespace would wait for good (nor does the garbage collector delete a pod no controller
// owns). The manager's deletion is not stopped there; the manager-writes policy lets it delete pods
// only in opted-in namespaces being deleted. all are the sequence's members whose labels resolve,
// holding every object that holds the groups before its own (members, stamped and owned ones).
func (r *Holder) freeLaterClaims(ctx context.Context, seq string, all, holding []resolvedObject, idx *policy.Index, sc Namespaces) error {
	claims := map[string]map[string]int32{} // namespace -> claim being deleted -> its group's order
	for _, o := range all {
		if o.Kind.GVR == claimsGVR && o.GetDeletionTimestamp() != nil {
			if claims[o.GetNamespace()] == nil {
				claims[o.GetNamespace()] = map[string]int32{}
			}
			claims[o.GetNamespace()][o.GetName()] = o.res.GroupOrder
		}
	}
	if len(claims) == 0 {
		return nil
	}
	earliest := holding[0].res.GroupOrder
	for _, o := range holding {
		earliest = min(earliest, o.res.GroupOrder)
	}
	laterThan := func(order int32) bool {
		return slices.ContainsFunc(holding, func(o resolvedObject) bool { return o.res.GroupOrder > order })
	}
	for ns, named := range claims {
		n := &corev1.Namespace{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil || n.DeletionTimestamp == nil {
			continue // only the namespace's deletion stops at the refusals
		}
		pods := r.Tracker.Dynamic.Resource(podsGVR).Namespace(ns)
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing the pods of namespace %s, which is being deleted: %w", ns, err)
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.GetDeletionTimestamp() != nil {
				continue
			}
			place := earliest // in no group: it goes with the earliest groups
			res, errs := resolve.Resolve(resolve.Object{Namespace: ns, NamespaceLabels: sc.Labels(ctx, ns), Labels: p.GetLabels()}, idx)
			switch {
			case len(errs) > 0:
				place = math.MinInt32 // labels that do not resolve: the DELETE check holds nothing for them
			case res != nil && res.Sequence != seq:
				continue // another sequence's: its own teardown decides
			case res != nil:
				place = res.GroupOrder
			}
			claim, ok := keeps(p, named, func(order int32) bool { return order > place || !laterThan(place) })
			if !ok {
				continue
			}
			uid := p.GetUID()
			err := pods.Delete(ctx, p.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if apierrors.IsConflict(err) {
				// The UID precondition (the pod was made again: the next pass decides on it), or the
				// DELETE check's refusal: retried while the pod is still the one decided on.
				if cur, gerr := pods.Get(ctx, p.GetName(), metav1.GetOptions{}); gerr == nil && cur.GetUID() == uid && cur.GetDeletionTimestamp() == nil {
					return fmt.Errorf("deleting pod %s, which keeps claim %s being deleted: %w", klog.KObj(p), claim, err)
				}
				continue
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting pod %s, which keeps claim %s being deleted: %w", klog.KObj(p), claim, err)
			}
			if err == nil {
				ctrl.LoggerFrom(ctx).Info("Deleted a pod that keeps a claim being deleted, in a namespace being deleted", "pod", klog.KObj(p), "claim", claim)
			}
		}
	}
	return nil
}

// keeps returns a claim among named (name -> its group's order) that a pod mounts and for which
// free says the pod may go.
func keeps(p *unstructured.Unstructured, named map[string]int32, free func(order int32) bool) (string, bool) {
	mounted := mountedClaims(members.Object{Kind: podKind, Unstructured: p})
	for _, name := range slices.Sorted(maps.Keys(mounted.names)) {
		if order, ok := named[name]; ok && free(order) {
			return name, true
		}
	}
	return "", false
}

var podKind = members.Kind{GVR: podsGVR, GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespaced: true}
