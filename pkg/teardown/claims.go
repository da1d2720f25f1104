package teardown

// Claims and the pods that mount them, in a namespace being deleted.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/resolve"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=delete

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// freeLaterClaims deletes, in a namespace being deleted, the pods that hold a later group's claim
// there: a pod of an earlier group of the sequence, or of no group, that mounts a claim of the
// sequence being deleted. The claim's pvc-protection finalizer waits for such a pod, and the DELETE
// check lets it go (Check.Refuse, mountsLater), but the namespace controller deletes pods as one
// collection in name order and stops at the first refusal: a held pod whose name comes first keeps
// it from ever asking, and the later group, the held group and the namespace would wait for good.
// The manager's deletion is not the namespace controller's, so it is not stopped there (and the
// manager-writes policy lets the manager delete pods only in namespaces being deleted). all are the
// sequence's members whose labels resolve.
func (r *Holder) freeLaterClaims(ctx context.Context, seq string, all []resolvedObject, idx *policy.Index, sc Namespaces) error {
	// The claims being deleted, per namespace, and the sequence's earliest group.
	claims := map[string]map[string]int32{}
	earliest := int32(0)
	for i, o := range all {
		if i == 0 || o.res.GroupOrder < earliest {
			earliest = o.res.GroupOrder
		}
		if o.Kind.GVR == claimsGVR && o.GetDeletionTimestamp() != nil {
			if claims[o.GetNamespace()] == nil {
				claims[o.GetNamespace()] = map[string]int32{}
			}
			claims[o.GetNamespace()][o.GetName()] = o.res.GroupOrder
		}
	}
	for ns, named := range claims {
		n := &corev1.Namespace{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil || n.DeletionTimestamp == nil {
			continue // only the namespace's deletion stops at the refusals
		}
		pods, err := r.Tracker.Dynamic.Resource(podsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing the pods of namespace %s, which is being deleted: %w", ns, err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.GetDeletionTimestamp() != nil {
				continue
			}
			claim, order, ok := mountedLater(p, named)
			if !ok {
				continue
			}
			res, errs := resolve.Resolve(resolve.Object{Namespace: ns, NamespaceLabels: sc.Labels(ctx, ns), Labels: p.GetLabels()}, idx)
			switch {
			case res != nil && len(errs) == 0 && (res.Sequence != seq || res.GroupOrder >= order):
				continue // another sequence's, or not before the claim's group: not held for it
			case res == nil && order <= earliest:
				continue
			}
			uid := p.GetUID()
			err := r.Tracker.Dynamic.Resource(podsGVR).Namespace(ns).Delete(ctx, p.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("deleting pod %s, which holds claim %s of a later group: %w", klog.KObj(p), claim, err)
			}
			ctrl.LoggerFrom(ctx).Info("Deleted a pod that holds a later group's claim in a namespace being deleted", "pod", klog.KObj(p), "claim", claim)
		}
	}
	return nil
}

// mountedLater returns the first of the named claims (name -> group order) that a pod mounts.
func mountedLater(p *unstructured.Unstructured, named map[string]int32) (string, int32, bool) {
	volumes, _, _ := unstructured.NestedSlice(p.Object, "spec", "volumes")
	for _, v := range volumes {
		name, _, _ := unstructured.NestedString(asMap(v), "persistentVolumeClaim", "claimName")
		if order, ok := named[name]; ok && name != "" {
			return name, order, true
		}
	}
	return "", 0, false
}
