package teardown

// The hold: deleted members wait until every later group of their sequence is gone.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/patch"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/resolve"
)

// Teardown event reasons.
const (
	ReasonTeardownHeld     = "TeardownHeld"
	ReasonTeardownReleased = "TeardownReleased"
	ReasonTeardownTimeout  = "TeardownTimeout"
	ReasonCleanupDeleted   = "CleanupDeleted"
	ReasonCleanupRefused   = "CleanupRefused"
	ReasonFinalizersForced = "FinalizersForced"
	ReasonFinalizerRemoved = "FinalizerReleased"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Holder is ordered teardown's step of a sequence's reconcile: it holds deleted members until every
// object of every later group that holds it (holds) is gone from the API server, deletes declared
// cleanup objects, forces stuck finalizers where the policy allows, and releases wavegate's
// finalizer wherever ordering no longer applies. It runs in the sequence controller's reconcile,
// independently of the creation steps (a failed hold does not stop ungating, nor the other way
// round).
type Holder struct {
	// Client reads Namespaces from the cache.
	Client   client.Reader
	Tracker  *members.Tracker
	Recorder events.EventRecorder
	// Now is the clock (tests may replace it).
	Now func() time.Time
	// Unavailable are the kinds the tracker could not see when the pass decided to order the
	// sequence: the consistent read that confirms a release leaves them out (see
	// members.Tracker.FreshMembers).
	Unavailable map[schema.GroupVersionResource]string
}

// Namespaces tells which namespaces wavegate acts in, and their labels (policies and shared
// sequences select namespaces by them).
type Namespaces interface {
	OptedIn(ctx context.Context, namespace string) bool
	Labels(ctx context.Context, namespace string) map[string]string
}

// Result is what the hold reports for the Sequence status, per group.
type Result struct {
	Terminating map[string]int32
	Held        map[string]int32
	// Owned counts the objects a controller made that hold the groups before theirs (holds), not
	// being deleted; Orders are the group orders of the groups the hold counted objects of.
	Owned  map[string]int32
	Orders map[string]int32
	// Resources are the kinds of each group's objects (members and terminating ones), as
	// members.ResourceString writes them.
	Resources map[string][]string
	// Requeue is when to look again (timeouts, cleanup objects that are not watched); 0: on events.
	Requeue time.Duration
	// Holds says, per held object, what it waits for: it goes on the cluster-scoped Sequence,
	// because a terminating namespace refuses new Events.
	Holds []string
}

type resolvedObject struct {
	members.Object
	res *resolve.Resolution
}

// Reconcile holds the deleted members of a sequence (objs: its members in opted-in namespaces)
// until every object of every later group that holds it (holds) is gone from the API server, then
// removes wavegate's finalizer. It also releases the finalizer wherever ordering no longer applies:
// the policy turned teardown off, or the labels no longer name a valid group. An object it fails to
// release or to decide on does not stop the others: the errors are returned together, and the
// caller retries.
func (r *Holder) Reconcile(ctx context.Context, seq string, objs []members.Object, idx *policy.Index, sc Namespaces) (*Result, error) {
	out := &Result{Terminating: map[string]int32{}, Held: map[string]int32{}, Owned: map[string]int32{}, Orders: map[string]int32{}, Resources: map[string][]string{}}
	var errs []error
	resources := map[string]map[string]bool{}
	defer func() {
		for g, set := range resources {
			out.Resources[g] = sortedKeys(set)
		}
	}()
	// Only members carry the finalizer; one on anything else (made by an older wavegate, say) is
	// released at once, never left for nobody to remove.
	nonMembers := r.Tracker.NonMembers(seq)
	for _, o := range nonMembers {
		if HasFinalizer(o) {
			if err := r.Release(ctx, o, "it is not a group member in its own right (its controller is)"); err != nil {
				errs = append(errs, err)
			}
		}
	}
	tally := func(o members.Object, res *resolve.Resolution) {
		if resources[res.Group] == nil {
			resources[res.Group] = map[string]bool{}
		}
		resources[res.Group][members.ResourceString(o.Kind.GVR)] = true
		out.Orders[res.Group] = res.GroupOrder
		switch {
		case o.GetDeletionTimestamp() != nil:
			out.Terminating[res.Group]++
		case !members.IsMember(o):
			out.Owned[res.Group]++
		}
	}
	// all are the sequence's objects whose labels resolve; stamped, those whose labels name a group
	// that does not resolve now, at the place admission stamped on them. While they exist they hold
	// the groups before that place as any later object does (a custom resource whose policy is being
	// applied again, on its operator's finalizer: released, the operator would leave it stuck), and
	// nothing else is decided on them.
	var all, stamped []resolvedObject
	for _, o := range objs {
		ns := o.GetNamespace()
		if !o.Kind.Namespaced {
			ns = ""
		}
		res, invalid := resolve.Resolve(resolve.Object{Namespace: ns, NamespaceLabels: sc.Labels(ctx, ns), Labels: o.GetLabels()}, idx)
		if res == nil || len(invalid) > 0 {
			// Labels that name no group any more (a policy's group label dropped) release the
			// object: nothing would show it to the hold again. Labels that name a group that does
			// not resolve now (its policy deleted and applied again, two policies disagreeing for a
			// moment, requireKnownGroups added) keep the finalizer of an object that is not being
			// deleted: admission adds it back only on a change, and policy churn would otherwise
			// strip the teardown order of every member it touched, for good. A deleted one cannot
			// be ordered: it goes at once, never stranded.
			if HasFinalizer(o) && (res == nil && len(invalid) == 0 || o.GetDeletionTimestamp() != nil) {
				if err := r.Release(ctx, o, "its labels no longer name a valid group"); err != nil {
					errs = append(errs, err)
				}
			}
			if st, ok := stampedIn(o, ns, sc.Labels(ctx, ns), idx); ok && len(invalid) > 0 {
				stamped = append(stamped, resolvedObject{o, st})
			}
			continue
		}
		all = append(all, resolvedObject{o, res})
		tally(o, res)
	}
	// owned are the objects a controller made that carry someone else's finalizer (holds): they
	// hold the groups before theirs as members do, and are counted with their group, but nothing is
	// decided on them.
	tree := owners{}
	for _, o := range slices.Concat(all, stamped) {
		tree.add(o, o.res)
	}
	for _, o := range nonMembers {
		tree.add(o, nil)
	}
	var owned []resolvedObject
	for _, o := range nonMembers {
		ns := o.Kind.NamespaceOf(o)
		if !holds(o) || !sc.OptedIn(ctx, ns) {
			continue
		}
		if res := placeOf(o, ns, sc.Labels(ctx, ns), idx); res != nil && !ownedByEarlier(o, res, tree) {
			owned = append(owned, resolvedObject{o, res})
			tally(o, res)
		}
	}
	if err := r.freeLaterClaims(ctx, seq, all, slices.Concat(all, stamped, owned), idx, sc); err != nil {
		errs = append(errs, err)
	}
	// The consistent read that confirms a release is made once per pass and shared by the objects it
	// releases: it is made after the cache's view that every one of them was checked against.
	var fresh []members.MetaObject
	read := false
	freshMembers := func() ([]members.MetaObject, error) {
		if read {
			return fresh, nil
		}
		f, err := r.Tracker.FreshMembers(ctx, seq, idx.MemberNamespace(seq), r.Unavailable, anyObject)
		if err != nil {
			return nil, err
		}
		fresh, read = f, true
		return fresh, nil
	}
	for _, o := range all {
		if !HasFinalizer(o) {
			continue
		}
		if reason, release := r.orderingOff(ctx, o); release {
			if err := r.Release(ctx, o.Object, reason); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if o.GetDeletionTimestamp() == nil {
			continue
		}
		held, why, requeue, err := r.hold(ctx, o, slices.Concat(all, stamped, owned), idx, sc, freshMembers)
		if err != nil {
			// Undecided: it stays held until a retry can tell.
			errs = append(errs, err)
			held = true
		}
		if held {
			out.Held[o.res.Group]++
			if why != "" {
				out.Holds = append(out.Holds, fmt.Sprintf("%s %s (group %s) %s", o.Kind.GVK.Kind, klog.KObj(o), o.res.Group, why))
			}
			if requeue > 0 && (out.Requeue == 0 || requeue < out.Requeue) {
				out.Requeue = requeue
			}
			continue
		}
		if err := r.removeFinalizer(ctx, o.Object); err != nil {
			errs = append(errs, err)
			continue
		}
		r.event(o.Unstructured, corev1.EventTypeNormal, ReasonTeardownReleased, "every later group of sequence %s is gone: deletion continues", seq)
	}
	return out, errors.Join(errs...)
}

// stampedIn is where admission placed an object whose labels do not resolve now (resolve.Stamped),
// trusted only within what its labels and namespace may join: the annotations are the object's own,
// and whoever may write the object may write them. A stamp naming another sequence than its labels
// do, or one its namespace may not join, places it nowhere: a tenant's object would otherwise hold
// another namespace's teardown.
func stampedIn(o metav1.Object, namespace string, nsLabels map[string]string, idx *policy.Index) (*resolve.Resolution, bool) {
	st, ok := resolve.Stamped(o.GetAnnotations())
	if !ok || st.Sequence != members.SequenceOf(o) || !idx.MayJoin(st.Sequence, namespace, nsLabels) {
		return nil, false
	}
	return st, true
}

// orderingOff reports whether an object's finalizer must be released although it is not deleted
// yet, or deleted without order: its namespace opted out, or its policy turned teardown off.
func (r *Holder) orderingOff(ctx context.Context, o resolvedObject) (string, bool) {
	if o.res.Policy != nil && o.res.Policy.Teardown == wavev1.TeardownDisabled {
		return fmt.Sprintf("WavePolicy %s turned teardown off for group %s", o.res.Policy.Policy, o.res.Group), true
	}
	if o.Kind.Namespaced {
		ns := &corev1.Namespace{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: o.GetNamespace()}, ns); err == nil && ns.Labels[keys.EnabledLabel] != "true" {
			return fmt.Sprintf("namespace %s is not opted in (%s)", ns.Name, keys.EnabledLabel), true
		}
	}
	return "", false
}

// hold decides whether a deleted member must wait, deleting its declared cleanup objects on the way.
func (r *Holder) hold(ctx context.Context, o resolvedObject, all []resolvedObject, idx *policy.Index, sc Namespaces,
	freshMembers func() ([]members.MetaObject, error)) (bool, string, time.Duration, error) {
	var remaining []string
	groups := map[string]int{}
	mounted := mountedClaims(o.Object)
	for _, l := range all {
		if l.res.GroupOrder > o.res.GroupOrder && !mounted.has(l.Kind.GVR, l) {
			groups[l.res.Group]++
			remaining = append(remaining, l.Kind.GVK.Kind+"/"+l.GetName())
		}
	}
	cleanupLeft, stuck, err := r.cleanup(ctx, o, idx)
	if err != nil {
		return false, "", 0, err
	}
	if len(remaining) == 0 && cleanupLeft == 0 {
		// Before letting go, confirm on a consistent read that no later object exists that the
		// cache has not seen (created a moment ago, say).
		fresh, err := freshMembers()
		if err != nil {
			return false, "", 0, err
		}
		placed := make([]placedObject, 0, len(fresh))
		tree := owners{}
		for _, f := range fresh {
			ns := f.Kind.NamespaceOf(f)
			if !sc.OptedIn(ctx, ns) {
				continue
			}
			// Placed as the cache's objects are, stamped ones and owned ones included.
			res := placeOf(f, ns, sc.Labels(ctx, ns), idx)
			tree.add(f, res)
			if res != nil && holds(f) && !mounted.has(f.Kind.GVR, f) {
				placed = append(placed, placedObject{f, res})
			}
		}
		for _, p := range placed {
			if p.res.GroupOrder > o.res.GroupOrder && !ownedByEarlier(p.Object, p.res, tree) {
				return true, "", time.Second, nil
			}
		}
		return false, "", 0, nil
	}
	var parts []string
	for _, g := range sortedKeys(groups) {
		parts = append(parts, fmt.Sprintf("group %s", g))
	}
	if cleanupLeft > 0 {
		parts = append(parts, fmt.Sprintf("declared cleanup (%s)", o.GetAnnotations()[keys.CleanupAnnotation]))
	}
	msg := fmt.Sprintf("held until %s is gone: %d objects remain", strings.Join(parts, " and "), len(remaining)+cleanupLeft)
	r.event(o.Unstructured, corev1.EventTypeNormal, ReasonTeardownHeld, "%s", msg)

	timeout := policy.DefaultTimeout
	force := false
	if o.res.Policy != nil {
		timeout, force = o.res.Policy.Timeout, o.res.Policy.ForceRemoveFinalizers
	}
	since := r.now().Sub(o.GetDeletionTimestamp().Time)
	if since < timeout {
		requeue := timeout - since
		if cleanupLeft > 0 && requeue > 2*time.Second {
			requeue = 2 * time.Second // cleanup objects are not watched
		}
		return true, msg, requeue, nil
	}
	r.event(o.Unstructured, corev1.EventTypeWarning, ReasonTeardownTimeout, "%s after %s", msg, timeout)
	if force && len(stuck) > 0 {
		for _, s := range stuck {
			if err := r.forceFinalizers(ctx, s); err != nil {
				return false, "", 0, err
			}
			r.event(o.Unstructured, corev1.EventTypeWarning, ReasonFinalizersForced,
				"removed the finalizers %v of %s/%s after %s (policy: forceRemoveFinalizers)", s.GetFinalizers(), s.GetNamespace(), s.GetName(), timeout)
		}
		return true, msg, time.Second, nil // look again once the forced objects are gone
	}
	return true, fmt.Sprintf("%s after its timeout of %s", msg, timeout), 30 * time.Second, nil
}

type stuckObject struct {
	gvr schema.GroupVersionResource
	*metav1.PartialObjectMetadata
}

// cleanup deletes the objects of the kinds a member declares (keys.CleanupAnnotation) and returns
// how many still exist, and those of them that are stuck being deleted.
//
// The annotation is written by whoever may label the member, a tenant of its namespace say, and the
// deletions are the manager's: what it declares must stay within what that author could reach.
// Objects of a namespaced kind are cleaned up in the member's own namespace only; a cluster-scoped
// kind (ClusterPolicy, say), whose objects are deleted everywhere, only for a member of a sequence
// that a WavePolicy (cluster-scoped: tenants cannot write one) declares clusterScoped. wavegate's
// own kinds and the objects it makes (wait Jobs, waiter access) are never cleaned up. A refused or
// unknown kind has nothing to wait for: it is skipped with a Warning Event.
func (r *Holder) cleanup(ctx context.Context, o resolvedObject, idx *policy.Index) (int, []stuckObject, error) {
	decl := o.GetAnnotations()[keys.CleanupAnnotation]
	if decl == "" {
		return 0, nil, nil
	}
	left := 0
	var stuck []stuckObject
	var refused []string
	defer func() {
		// One Event for all of them: Events of one object and reason merge into a series.
		if len(refused) > 0 {
			r.event(o.Unstructured, corev1.EventTypeWarning, ReasonCleanupRefused, "%s: %s", keys.CleanupAnnotation, strings.Join(refused, "; "))
		}
	}()
	for _, kind := range strings.Split(decl, ",") {
		kind = strings.TrimSpace(kind)
		if kind == "" {
			continue
		}
		gvr, namespaced, err := r.resourceFor(kind)
		if err != nil {
			refused = append(refused, fmt.Sprintf("%s: %v", kind, err))
			continue
		}
		if reason := cleanupRefused(gvr, namespaced, o.GetNamespace(), o.res.Sequence, idx); reason != "" {
			refused = append(refused, fmt.Sprintf("%s: %s", kind, reason))
			continue
		}
		ns := ""
		if namespaced {
			ns = o.GetNamespace()
		}
		list, err := r.Tracker.Metadata.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return 0, nil, fmt.Errorf("listing cleanup kind %s: %w", kind, err)
		}
		forbidden := false
		for i := range list.Items {
			it := &list.Items[i]
			if wavegateMade(it) {
				continue
			}
			left++
			if it.DeletionTimestamp != nil {
				stuck = append(stuck, stuckObject{gvr, it})
				continue
			}
			if forbidden {
				continue
			}
			err := r.Tracker.Metadata.Resource(gvr).Namespace(it.Namespace).Delete(ctx, it.Name,
				metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationBackground)})
			if apierrors.IsForbidden(err) {
				// Waiting for the objects to go some other way keeps the member held, and its
				// timeout counting, instead of failing the whole hold on every pass.
				forbidden = true
				refused = append(refused, fmt.Sprintf("%s: wavegate may not delete them (grant delete with a ClusterRole labeled %s=true); waiting for them to be deleted",
					kind, keys.AggregateToManagerLabel))
				continue
			}
			if client.IgnoreNotFound(err) != nil {
				return 0, nil, fmt.Errorf("deleting cleanup object %s %s: %w", kind, klog.KObj(it), err)
			}
			r.event(o.Unstructured, corev1.EventTypeNormal, ReasonCleanupDeleted, "deleted %s %s before this object goes", kind, klog.KObj(it))
		}
	}
	return left, stuck, nil
}

// cleanupRefused says why a member of sequence seq, in namespace ns ("" for a cluster-scoped
// member), may not declare the cleanup of a kind, or "".
func cleanupRefused(gvr schema.GroupVersionResource, namespaced bool, ns, seq string, idx *policy.Index) string {
	if gvr.Group == keys.Domain {
		return "wavegate's own kinds are never cleaned up"
	}
	if namespaced && ns == "" {
		// A namespaced kind is cleaned up in the member's namespace; a cluster-scoped member has
		// none, and a list without one would reach every namespace, opted in or not.
		return "a namespaced kind on a cluster-scoped member, whose objects would be deleted in every namespace: declare it on a member in the namespace whose objects must go"
	}
	if !namespaced && !idx.ClusterScoped(seq) {
		return fmt.Sprintf("a cluster-scoped kind, whose objects would be deleted everywhere: only members of a sequence that a WavePolicy declares with clusterScoped: true may declare one (sequence %q is not)", seq)
	}
	return ""
}

// wavegateMade reports whether wavegate made an object (a wait Job, a waiter's access): declared
// cleanup never deletes those.
func wavegateMade(o metav1.Object) bool {
	l := o.GetLabels()
	return l[keys.WaitJobLabel] != "" || l[keys.WaiterRBACLabel] != ""
}

func (r *Holder) resourceFor(kind string) (schema.GroupVersionResource, bool, error) {
	gr := schema.ParseGroupResource(kind)
	for _, k := range r.Tracker.Kinds() {
		if k.GVR.GroupResource() == gr {
			return k.GVR, k.Namespaced, nil
		}
	}
	return schema.GroupVersionResource{}, false, fmt.Errorf("wavegate does not watch it: it is not served, or wavegate may not list and watch it (grant list, watch and delete with a ClusterRole labeled %s=true); not cleaned up", keys.AggregateToManagerLabel)
}

func (r *Holder) forceFinalizers(ctx context.Context, s stuckObject) error {
	patch := []byte(fmt.Sprintf(`{"metadata":{"finalizers":null,"resourceVersion":%q}}`, s.ResourceVersion))
	_, err := r.Tracker.Metadata.Resource(s.gvr).Namespace(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: keys.FieldManager})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("forcing the finalizers of %s: %w", klog.KObj(s), err)
	}
	return nil
}

// ConditionHeld is the Sequence condition that is True while teardown holds a deleted member.
const ConditionHeld = "TeardownHeld"

// Condition is the ConditionHeld condition for what the hold reported.
func Condition(holds []string) metav1.Condition {
	if len(holds) == 0 {
		return metav1.Condition{Type: ConditionHeld, Status: metav1.ConditionFalse, Reason: "NothingHeld", Message: "no deleted member is held"}
	}
	holds = slices.Clone(holds)
	sort.Strings(holds)
	return metav1.Condition{Type: ConditionHeld, Status: metav1.ConditionTrue, Reason: ReasonTeardownHeld, Message: strings.Join(holds, "; ")}
}

// holds reports whether an object of a sequence holds the groups before its own while it exists: a
// member, or an object a controller made (an operator's child resource, owned by the resource it
// was made for) that carries a finalizer other than wavegate's. That object is no member, but it
// waits for whoever removes its finalizer, often the operator of an earlier group: released when
// its owner went, the operator would leave it stuck. One without a finalizer goes with its owner,
// whatever runs.
func holds(o metav1.Object) bool {
	if members.IsMember(o) {
		return true
	}
	if _, waitJob := o.GetLabels()[keys.WaitJobLabel]; waitJob || members.ClaimTemplate(o) {
		// A StatefulSet's claim waits for nobody's controller (pvc-protection is the kubelet's and
		// kube-controller-manager's), and stays when the StatefulSet goes (Retain).
		return false
	}
	return slices.ContainsFunc(o.GetFinalizers(), func(f string) bool { return f != keys.TeardownFinalizer })
}

// claimSet is the claims a held workload's pods mount: by name, and by the name prefix of those its
// volumeClaimTemplates make (a StatefulSet's, <template>-<statefulset>-<ordinal>).
type claimSet struct {
	namespace string
	names     map[string]bool
	prefixes  []string
}

// mountedClaims returns the claims the pods of a workload mount. A later group's claim among them
// does not hold the workload: its pvc-protection finalizer waits for the pods, which the garbage
// collector deletes only once the workload is gone (background deletion), so holding the workload
// for the claim would hold both for good.
func mountedClaims(o members.Object) claimSet {
	out := claimSet{namespace: o.GetNamespace()}
	path, ok := members.PodSpecPath(o.Kind.GVK.GroupKind())
	if !ok {
		return out
	}
	volumes, _, _ := unstructured.NestedSlice(o.Object, append(slices.Clip(path), "volumes")...)
	for _, v := range volumes {
		if name, _, _ := unstructured.NestedString(asMap(v), "persistentVolumeClaim", "claimName"); name != "" {
			if out.names == nil {
				out.names = map[string]bool{}
			}
			out.names[name] = true
		}
	}
	if o.Kind.GVK.GroupKind() == (schema.GroupKind{Group: "apps", Kind: "StatefulSet"}) {
		templates, _, _ := unstructured.NestedSlice(o.Object, "spec", "volumeClaimTemplates")
		for _, t := range templates {
			if name, _, _ := unstructured.NestedString(asMap(t), "metadata", "name"); name != "" {
				out.prefixes = append(out.prefixes, name+"-"+o.GetName()+"-")
			}
		}
	}
	return out
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// has reports whether an object (of resource gvr) is one of the claims.
func (c claimSet) has(gvr schema.GroupVersionResource, o metav1.Object) bool {
	if gvr != claimsGVR || o.GetNamespace() != c.namespace {
		return false
	}
	return c.names[o.GetName()] || slices.ContainsFunc(c.prefixes, func(p string) bool { return strings.HasPrefix(o.GetName(), p) })
}

// anyObject keeps every object of a consistent read: which hold is decided on all of them (owners).
func anyObject(metav1.Object) bool { return true }

// placedObject is an object of a sequence and where teardown places it.
type placedObject struct {
	metav1.Object
	res *resolve.Resolution
}

// owners are a sequence's objects by UID, as ownedByEarlier needs them: a member's group order, or
// the controller of an object that is no member.
type owners map[types.UID]owner

type owner struct {
	member     bool
	order      int32
	controller types.UID
}

// add records an object; res is where a member stands (nil: not placed, or no member).
func (m owners) add(o metav1.Object, res *resolve.Resolution) {
	if members.IsMember(o) {
		if res != nil {
			m[o.GetUID()] = owner{member: true, order: res.GroupOrder}
		}
		return
	}
	if c := metav1.GetControllerOfNoCopy(o); c != nil {
		m[o.GetUID()] = owner{controller: c.UID}
	}
}

// maxOwnerChain bounds the controllers followed up from an object (ownerReferences may loop).
const maxOwnerChain = 16

// ownedByEarlier reports whether an object that is no member is made, through the controllers the
// sequence's objects show (an operator's StatefulSet between a custom resource and its claims), by
// a member of an earlier group. It holds nothing: that member is held while it exists, and the
// object is deleted only once that member is gone, a cycle.
func ownedByEarlier(o metav1.Object, res *resolve.Resolution, m owners) bool {
	c := metav1.GetControllerOfNoCopy(o)
	if c == nil {
		return false
	}
	uid := c.UID
	for range maxOwnerChain {
		n, ok := m[uid]
		switch {
		case !ok:
			return false
		case n.member:
			return n.order < res.GroupOrder
		}
		uid = n.controller
	}
	return false
}

// HasFinalizer reports whether an object carries wavegate's teardown finalizer.
func HasFinalizer(o metav1.Object) bool {
	return slices.Contains(o.GetFinalizers(), keys.TeardownFinalizer)
}

// removeFinalizer removes wavegate's finalizer with a JSON patch that tests the object is the one
// the pass decided on (its UID: one deleted and created again under its name keeps the finalizer
// admission gave it, and its own teardown order) and that the finalizer is where it was seen, so a
// concurrent change of the finalizers fails the patch instead of removing another. A failed test
// (422) is told from a refusal, which is a 422 too (an admission policy's, a schema's), by reading
// the object: gone, another object or without the finalizer, there is nothing to remove; still
// carrying it, the patch is made once more at its new place, and a second failure is returned (the
// pass is retried: no later event may come to reconcile it again).
func (r *Holder) removeFinalizer(ctx context.Context, o members.Object) error {
	res := r.Tracker.Dynamic.Resource(o.Kind.GVR).Namespace(o.Kind.NamespaceOf(o))
	err := patchOutFinalizer(ctx, res, o.Unstructured)
	if apierrors.IsInvalid(err) {
		cur, gerr := res.Get(ctx, o.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) {
			return nil
		}
		if gerr != nil {
			return fmt.Errorf("reading %s %s after its finalizer's removal failed (%v): %w", o.Kind.GVK.Kind, klog.KObj(o), err, gerr)
		}
		if cur.GetUID() != o.GetUID() || !HasFinalizer(cur) {
			return nil
		}
		err = patchOutFinalizer(ctx, res, cur)
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing the teardown finalizer of %s %s: %w", o.Kind.GVK.Kind, klog.KObj(o), err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Removed the teardown finalizer", "kind", o.Kind.GVK.Kind, "object", klog.KObj(o))
	return nil
}

func patchOutFinalizer(ctx context.Context, res dynamic.ResourceInterface, o *unstructured.Unstructured) error {
	i := slices.Index(o.GetFinalizers(), keys.TeardownFinalizer)
	if i < 0 {
		return nil
	}
	body, err := patch.Marshal(patch.TestAndRemoveFrom(o.GetUID(), "/metadata/finalizers", i, keys.TeardownFinalizer)...)
	if err != nil {
		return err
	}
	_, err = res.Patch(ctx, o.GetName(), types.JSONPatchType, body, metav1.PatchOptions{FieldManager: keys.FieldManager})
	return err
}

// Release removes wavegate's finalizer from an object that ordering no longer applies to, with an
// Event that says why.
func (r *Holder) Release(ctx context.Context, o members.Object, why string) error {
	if err := r.removeFinalizer(ctx, o); err != nil {
		return err
	}
	r.event(o.Unstructured, corev1.EventTypeNormal, ReasonFinalizerRemoved, "released the teardown finalizer: %s", why)
	return nil
}

// event records an Event on a member, unless its namespace is being deleted.
func (r *Holder) event(o *unstructured.Unstructured, typ, reason, format string, args ...any) {
	Eventf(r.Client, r.Recorder, o, typ, reason, format, args...)
}

// Eventf records an Event on an object, unless its namespace is being deleted: the API server
// refuses new content there (the Sequence's TeardownHeld condition and Events say it instead).
func Eventf(c client.Reader, rec events.EventRecorder, o *unstructured.Unstructured, typ, reason, format string, args ...any) {
	if rec == nil {
		return
	}
	if ns := o.GetNamespace(); ns != "" {
		n := &corev1.Namespace{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: ns}, n); err == nil && n.DeletionTimestamp != nil {
			return
		}
	}
	rec.Eventf(o, nil, typ, reason, "Teardown", format, args...)
}

func (r *Holder) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
