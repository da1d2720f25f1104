package teardown

// The DELETE check: which deletions ordered teardown refuses, retryably, while later groups of
// the deleted object's sequence still have objects. The admission webhook (pkg/mutate) reads the
// AdmissionReview and asks Check.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/resolve"
)

// LaterGroups tells which later groups of a sequence still have objects, as the Sequence status
// says.
type LaterGroups interface {
	// Later returns the later groups (order above order) that still have objects, how many, and
	// the resources of their objects; complete is false when some group does not list them.
	Later(sequence string, order int32) (groups []string, remaining int32, resources []string, complete bool)
	// Spanning returns the namespace's own sequences (its name, and <namespace>.<name>) whose
	// objects are in more than one group, each with the order of its earliest group.
	Spanning(namespace string) []Span
}

// Span is a sequence whose objects are in more than one group, and its earliest group's order.
type Span struct {
	Sequence string
	Earliest int32
}

// NamespaceSource reads namespaces from the manager's cache (a namespace the cache has not seen yet
// with one GET).
type NamespaceSource interface {
	// Terminating reports whether a namespace is being deleted.
	Terminating(namespace string) bool
	// Labels returns a namespace's labels (policies and shared sequences select namespaces by
	// them); an error when they cannot be known.
	Labels(namespace string) (map[string]string, error)
}

// Deletion is a DELETE request as the check sees it.
type Deletion struct {
	Namespace string
	// Name is the object's name (the old object's: a DeleteCollection's requests name none);
	// Version the resource's version in the request.
	Name, Version string
	Resource      schema.GroupResource
	Kind          string
	Foreground    bool
	// User is the requester's user name.
	User string
	// Labels of the object; Deleting is true when it is already being deleted.
	Labels   map[string]string
	Deleting bool
	// ControllerKind and ControllerName name the object's controller, if any.
	ControllerKind, ControllerName string
	// Claims are the PersistentVolumeClaims a pod mounts (spec.volumes[].persistentVolumeClaim).
	Claims []string
}

// Check is the DELETE check of ordered teardown. It refuses, retryably (409 Conflict):
//
//   - a *foreground* DELETE of a group member while later groups of its sequence still have
//     objects: foreground deletion deletes the member's pods before the member, whatever
//     finalizers the member has, so the teardown finalizer cannot keep an operator running for its
//     custom resources;
//   - in a namespace that is being deleted, the DELETE of a running pod (or ReplicaSet) of a
//     workload whose group is held: the namespace controller deletes every pod and ReplicaSet of
//     the namespace directly, so the finalizer that keeps the Deployment object would not keep the
//     operator's process. The namespace controller retries with back-off (at most 60 s apart);
//   - the namespace controller's DELETE of anything else an earlier group may need while later
//     groups still have objects: a held group's members of every kind, and the objects that belong
//     to no group (the operator's ServiceAccount, RBAC, Lease, Service and EndpointSlices, most
//     often unlabeled). A finalizer would keep such an object but mark it deleted, and that is
//     already too late: the API server stops accepting the tokens of a ServiceAccount deleted more
//     than a minute ago, and a deleted Lease or EndpointSlice cannot be created again in a
//     terminating namespace (leader election is lost, a webhook has no endpoints). Objects without
//     a group are counted in the namespace's own sequences with their earliest group: they go with
//     it, once every later group is gone. The namespace controller deletes each kind as one
//     collection, in name order, and stops at its first refusal, so an object of a kind that the
//     later groups also have objects of is held this way only when none of theirs is named after
//     it (see holdsNothingAfter): that would hold them too, and the namespace for good. Only the namespace controller's requests are refused
//     (kube-controller-manager with per-controller credentials, --use-service-account-credentials,
//     as kubeadm and managed clusters run it): an operator's own deletions while it finalizes, and
//     the garbage collector's, never are. Secrets and Events never reach wavegate.
//
// Background deletion elsewhere (kubectl's default, Helm, Flux) is never refused: the finalizer
// orders it. The kubelet, eviction (its own subresource), node drain and rollouts are never
// refused: only deletions in a terminating namespace are, and never those of pods that are
// already terminating or those a node makes. The check reads Sequence status and namespaces from
// memory, and before it refuses it confirms on a consistent read that the later groups' objects
// still exist (the Sequence status lags the API server by a reconcile, and Argo CD deletes the next
// wave the moment the last one is gone). Its webhook fails open (failurePolicy Ignore).
type Check struct {
	Later      LaterGroups
	Namespaces NamespaceSource
	// Metadata reads the later groups' objects for the confirmation; nil trusts the status alone.
	Metadata metadata.Interface
}

// confirmTimeout bounds the consistent read before a refusal (the webhook's timeout is 5 s).
const confirmTimeout = 3 * time.Second

// heldWorkloads are the controllers whose pods (and, for a Deployment, ReplicaSets) teardown keeps
// while their namespace is deleted: the shapes an operator ships as.
var heldWorkloads = map[schema.GroupResource]map[string]bool{
	{Resource: "pods"}:                       {"ReplicaSet": true, "StatefulSet": true, "DaemonSet": true},
	{Group: "apps", Resource: "replicasets"}: {"Deployment": true},
}

// Relevant reports whether a deletion of a resource may be refused at all: foreground deletions,
// pods and ReplicaSets (namespace deletion), and whatever the namespace controller deletes.
// Everything else is allowed without reading it.
func Relevant(resource schema.GroupResource, foreground bool, user string) bool {
	_, held := heldWorkloads[resource]
	return foreground || held || user == keys.NamespaceControllerUser
}

// Ordered reports whether a member's deletion is ordered: the default, unless its policy turns
// teardown off.
func Ordered(res *resolve.Resolution) bool {
	return res.Policy == nil || res.Policy.Teardown != wavev1.TeardownDisabled
}

// Refuse returns why a deletion must wait, or "" when it may go ahead.
func (c *Check) Refuse(ctx context.Context, idx *policy.Index, d Deletion) string {
	owners, held := heldWorkloads[d.Resource]
	sweep := d.User == keys.NamespaceControllerUser && d.Namespace != "" && !d.Deleting
	if idx == nil || !d.Foreground && !held && !sweep {
		return ""
	}
	nsLabels, err := NamespaceLabels(c.Namespaces, idx, d.Namespace)
	if err != nil {
		return "" // fail open
	}
	// Every read of one decision shares one deadline, within the webhook's timeout.
	ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	claims := c.claimPlaces(ctx, idx, d, nsLabels)
	after := c.afterIt(ctx, idx, d)
	res, errs := resolve.Resolve(resolve.Object{Namespace: d.Namespace, NamespaceLabels: nsLabels, Labels: d.Labels}, idx)
	if res == nil && len(errs) == 0 && sweep && !d.Foreground {
		return c.refuseUngrouped(ctx, idx, d, nsLabels, claims, after)
	}
	if res == nil || len(errs) > 0 || !Ordered(res) {
		return ""
	}
	if held && !d.Foreground && !sweep {
		// Only the namespace's own teardown is refused: not a rollout, not the kubelet, not a pod
		// that is already terminating, not a deletion outside a terminating namespace.
		// The namespace controller deletes only in terminating namespaces: its identity (where
		// kube-controller-manager uses per-controller credentials) needs no cache.
		terminating := d.User == keys.NamespaceControllerUser || c.Namespaces != nil && c.Namespaces.Terminating(d.Namespace)
		if d.Deleting || !owners[d.ControllerKind] || !terminating || strings.HasPrefix(d.User, "system:node:") {
			return ""
		}
	}
	groups, remaining, resources, cleanups := c.later(ctx, idx, res.Sequence, res.GroupOrder)
	if remaining == 0 || mountsLater(claims(), res.Sequence, res.GroupOrder) || sweep && slices.Contains(cleanups, d.Resource) {
		return ""
	}
	if sweep && !d.Foreground && !(held && owners[d.ControllerKind]) && sameResource(resources, d.Resource) &&
		!holdsNothingAfter(after(), idx, d, nsLabels, res.Sequence, res.GroupOrder) {
		// The namespace controller deletes each kind as one collection, in name order, and stops
		// at the first refusal: holding this object would hold the later groups' objects of its
		// kind named after it, and with them the hold itself.
		return ""
	}
	if d.Foreground {
		return fmt.Sprintf("wavegate: group %q of sequence %q is deleted after group(s) %s (%d objects remain); a foreground deletion would stop "+
			"its pods first. Retry once they are gone, or delete with --cascade=background (wavegate then holds it until they are gone)",
			res.Group, res.Sequence, strings.Join(groups, ", "), remaining)
	}
	if !held || sweep && !owners[d.ControllerKind] {
		return fmt.Sprintf("wavegate: namespace %s is being deleted; this %s of group %q stays until group(s) %s of sequence %q "+
			"are gone (%d objects remain), so that its group can finalize them; the namespace's deletion retries by itself. "+
			"See `kubectl get sequence`; `wavegate uninstall` stops all ordering",
			d.Namespace, d.Kind, res.Group, strings.Join(groups, ", "), res.Sequence, remaining)
	}
	return fmt.Sprintf("wavegate: namespace %s is being deleted; this %s of group %q (%s %s) keeps running until group(s) %s of sequence %q "+
		"are gone (%d objects remain), so that it can finalize them; the namespace's deletion retries by itself. "+
		"See `kubectl get sequence`; `wavegate uninstall` stops all ordering",
		d.Namespace, d.Kind, res.Group, d.ControllerKind, d.ControllerName, strings.Join(groups, ", "), res.Sequence, remaining)
}

// refuseUngrouped decides the namespace controller's deletion of an object that belongs to no
// group: it stays while any of the namespace's own sequences has objects after its earliest group
// (it goes with that group).
func (c *Check) refuseUngrouped(ctx context.Context, idx *policy.Index, d Deletion, nsLabels map[string]string,
	claims func() []*resolve.Resolution, after func() []metav1.PartialObjectMetadata) string {
	for _, sp := range c.Later.Spanning(d.Namespace) {
		groups, remaining, resources, cleanups := c.later(ctx, idx, sp.Sequence, sp.Earliest)
		if remaining == 0 || mountsLater(claims(), sp.Sequence, sp.Earliest) || slices.Contains(cleanups, d.Resource) ||
			sameResource(resources, d.Resource) && !holdsNothingAfter(after(), idx, d, nsLabels, sp.Sequence, sp.Earliest) {
			// Nothing later, or the later groups' objects include this kind and one is named after
			// it: refusing it would hold them too (one collection per kind, deleted in name order up
			// to the first refusal).
			continue
		}
		return fmt.Sprintf("wavegate: namespace %s is being deleted; this %s belongs to no group and stays, with the earliest groups of sequence %q, "+
			"until group(s) %s are gone (%d objects remain): an earlier group (an operator, say) may need it to finalize them "+
			"(its ServiceAccount, RBAC, Lease, Service). The namespace's deletion retries by itself. "+
			"See `kubectl get sequence`; `wavegate uninstall` stops all ordering",
			d.Namespace, d.Kind, sp.Sequence, strings.Join(groups, ", "), remaining)
	}
	return ""
}

// later returns the groups of a sequence after order that still have objects, and how many: as the
// Sequence status says, confirmed on a consistent read when the status lists their resources. The
// consistent read also returns the resources their objects declare for cleanup
// (keys.CleanupAnnotation): such an object's deletion waits for every object of those kinds in its
// namespace (when wavegate may not delete them, until someone else does), so the namespace
// controller's deletion of one of them is never held for it, which would hold both for good.
func (c *Check) later(ctx context.Context, idx *policy.Index, seq string, order int32) ([]string, int32, []string, []schema.GroupResource) {
	groups, remaining, resources, complete := c.Later.Later(seq, order)
	if remaining == 0 || c.Metadata == nil || !complete {
		return groups, remaining, resources, nil
	}
	ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	live, n, cleanups, err := c.confirm(ctx, idx, seq, order, resources)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Confirming the later groups on a consistent read; refusing as the Sequence status says",
			"sequence", seq, "order", order)
		return groups, remaining, resources, nil
	}
	return live, n, resources, cleanups
}

// claimPlaces returns where the claims a pod mounts stand (Deletion.Claims), read at most once per
// decision and only when asked: the claims of no group, or that cannot be read, are left out.
func (c *Check) claimPlaces(ctx context.Context, idx *policy.Index, d Deletion, nsLabels map[string]string) func() []*resolve.Resolution {
	return sync.OnceValue(func() []*resolve.Resolution {
		if c.Metadata == nil {
			return nil
		}
		var out []*resolve.Resolution
		for _, name := range d.Claims {
			claim, err := c.Metadata.Resource(claimsGVR).Namespace(d.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				if !apierrors.IsNotFound(err) {
					// Taken as not a later group's: the deletion is refused, and the namespace controller retries.
					ctrl.LoggerFrom(ctx).Error(err, "Reading a claim the pod mounts", "claim", klog.KRef(d.Namespace, name))
				}
				continue
			}
			if res := placeOf(claim, d.Namespace, nsLabels, idx); res != nil {
				out = append(out, res)
			}
		}
		return out
	})
}

// afterIt returns the objects of the deleted object's kind in its namespace that are named after
// it and are not being deleted, read on a consistent LIST at most once per decision and only when
// asked (those with a group label); nil when they cannot be read (holdsNothingAfter is then false:
// nothing is held).
func (c *Check) afterIt(ctx context.Context, idx *policy.Index, d Deletion) func() []metav1.PartialObjectMetadata {
	return sync.OnceValue(func() []metav1.PartialObjectMetadata {
		if c.Metadata == nil || d.Name == "" || d.Version == "" {
			return nil
		}
		gvr := d.Resource.WithVersion(d.Version)
		out := []metav1.PartialObjectMetadata{}
		// Only objects with a group label can be placed anywhere (one in no group holds nothing).
		for _, l := range idx.GroupLabels() {
			list, err := c.Metadata.Resource(gvr).Namespace(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: members.Selector(l)})
			if err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Listing the objects of the kind being deleted; not holding it", "resource", gvr.String(),
					"namespace", d.Namespace)
				return nil
			}
			for _, o := range list.Items {
				if o.Name > d.Name && o.DeletionTimestamp == nil {
					out = append(out, o)
				}
			}
		}
		return out
	})
}

// holdsNothingAfter reports whether refusing the namespace controller's deletion of d, placed in
// sequence seq at order (its group's, or the earliest group's for an object in no group), holds
// nothing that this hold waits for. The namespace controller deletes each kind of a namespace as
// one collection (DeleteCollection, one object after the other in name order) and stops at its
// first refusal, so a refusal keeps every object of the kind named after it (after: afterIt). Name
// order is the order kube-apiserver lists what it stores (etcd's keys, and its watch cache's); an
// aggregated API server might list otherwise. With more than one DeleteCollection worker, a
// refusal stops only its own: more is deleted, never less.
// That costs nothing for one in no group (it holds nothing), nor for one of the same sequence in a
// group no later than this one (it is held at least as long). Any other (a later group's object
// above all, or another sequence's) would be kept for as long as this one is, and could be what
// keeps it: the deletion goes ahead instead. after is nil when it could not be read: false.
func holdsNothingAfter(after []metav1.PartialObjectMetadata, idx *policy.Index, d Deletion, nsLabels map[string]string, seq string, order int32) bool {
	if after == nil {
		return false
	}
	for i := range after {
		res := placeOf(&after[i], d.Namespace, nsLabels, idx)
		if res != nil && (res.Sequence != seq || res.GroupOrder > order) {
			return false
		}
	}
	return true
}

// mountsLater reports whether a pod mounts a claim of a later group than order in sequence seq
// (claims: claimPlaces). Such a pod is never held: the claim's deletion waits for the pod (its
// pvc-protection finalizer stays while a scheduled pod uses it), so holding the pod until the later
// groups are gone would hold them, and the pod, for good, and the namespace with them.
func mountsLater(claims []*resolve.Resolution, seq string, order int32) bool {
	return slices.ContainsFunc(claims, func(res *resolve.Resolution) bool { return res.Sequence == seq && res.GroupOrder > order })
}

var claimsGVR = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}

// placeOf is where an object of a sequence stands for teardown: where its labels resolve, or, when
// they name a group that does not resolve now, where admission stamped it (stampedIn). nil: nowhere.
func placeOf(o metav1.Object, namespace string, nsLabels map[string]string, idx *policy.Index) *resolve.Resolution {
	res, errs := resolve.Resolve(resolve.Object{Namespace: namespace, NamespaceLabels: nsLabels, Labels: o.GetLabels()}, idx)
	if st, ok := stampedIn(o, namespace, nsLabels, idx); ok && len(errs) > 0 {
		return st // its labels do not resolve now: where admission placed it
	}
	if len(errs) > 0 {
		return nil
	}
	return res
}

// sameResource reports whether resources (members.ResourceString) include the resource deleted.
func sameResource(resources []string, gr schema.GroupResource) bool {
	for _, r := range resources {
		if gvr, err := members.ParseResource(r); err == nil && gvr.GroupResource() == gr {
			return true
		}
	}
	return false
}

// confirm counts, on a consistent read of the given resources, the objects of a sequence's groups
// after order that still exist, resolved as admission resolves them, and the resources they declare
// for cleanup.
func (c *Check) confirm(ctx context.Context, idx *policy.Index, seq string, order int32, resources []string) ([]string, int32, []schema.GroupResource, error) {
	kinds := make([]members.Kind, 0, len(resources))
	for _, r := range resources {
		gvr, err := members.ParseResource(r)
		if err != nil {
			return nil, 0, nil, err
		}
		kinds = append(kinds, members.Kind{GVR: gvr})
	}
	objs, err := members.ListMembers(ctx, c.Metadata, kinds, idx.GroupLabels(), seq, metav1.NamespaceAll, anyObject)
	if err != nil {
		return nil, 0, nil, err
	}
	// Only the later groups' kinds are read: an earlier member of another kind is not seen, and what
	// it made counts here (the hold and the status do not count it, so this refuses only while the
	// status counts other later objects).
	var placed []placedObject
	tree := owners{}
	for _, o := range objs {
		ns := o.GetNamespace()
		var nsLabels map[string]string
		if ns != "" && c.Namespaces != nil {
			if nsLabels, err = c.Namespaces.Labels(ns); err != nil {
				return nil, 0, nil, err
			}
			if nsLabels[keys.EnabledLabel] != "true" {
				continue // the controllers order only opted-in namespaces
			}
		}
		res := placeOf(o, ns, nsLabels, idx) // as the hold places it
		tree.add(o, res)
		if res != nil && res.Sequence == seq && holds(o) {
			placed = append(placed, placedObject{o, res})
		}
	}
	groups := map[string]bool{}
	var n int32
	var cleanups []schema.GroupResource
	for _, p := range placed {
		if p.res.GroupOrder > order && !ownedByEarlier(p.Object, p.res, tree) {
			groups[p.res.Group] = true
			n++
			for kind := range strings.SplitSeq(p.GetAnnotations()[keys.CleanupAnnotation], ",") {
				if kind = strings.TrimSpace(kind); kind != "" {
					cleanups = append(cleanups, schema.ParseGroupResource(kind))
				}
			}
		}
	}
	return sortedKeys(groups), n, cleanups, nil
}

// namespaceLabels returns the labels of a namespace when resolution needs them.
func NamespaceLabels(ns NamespaceSource, idx *policy.Index, namespace string) (map[string]string, error) {
	if namespace == "" || !idx.NeedsNamespaceLabels() {
		return nil, nil
	}
	if ns == nil {
		return nil, errors.New("no namespace source")
	}
	return ns.Labels(namespace)
}
