// Package mutate is wavegate's mutating admission webhook. It stamps the derived waves and group
// identity on group members, and releases the teardown finalizer of a member that an update takes
// out of its group. It is pure: it reads the compiled policies and namespaces from memory
// (a namespace created a moment ago with one GET), writes nothing and never creates objects, so it
// is safe under server-side dry-run.
package mutate

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/patch"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/resolve"
	"wavegate.io/wavegate/pkg/teardown"
)

// Path is where the webhook server serves the mutating webhook.
const Path = "/mutate-wavegate"

// The webhook configuration is generated from this marker; config/webhook adds the namespace and
// object selectors that controller-gen cannot express.
// +kubebuilder:webhook:path=/mutate-wavegate,mutating=true,failurePolicy=fail,sideEffects=None,groups=*,resources=*,verbs=create;update,versions=*,name=objects.wavegate.io,admissionReviewVersions=v1,timeoutSeconds=5,reinvocationPolicy=IfNeeded,matchPolicy=Equivalent

// PolicySource serves the compiled policies.
type PolicySource interface {
	// Index returns the current policies, or nil while they are not loaded yet.
	Index() *policy.Index
}

// GateSource tells admission which pod templates the controller has cleared to start at once.
type GateSource interface {
	Cleared(sequence, group, template string) bool
}

// PermissionSource tells what the manager may do with a resource, from a review it keeps in memory
// (never a call per request). Admission never adds a finalizer that no wavegate controller could
// remove, and warns when a member is of a kind the member tracker may not track.
type PermissionSource interface {
	// Ready reports whether the permissions are known. Until then CanPatch and CanWatch say no, and
	// that no means "not known yet", not "not allowed".
	Ready() bool
	// CanPatch reports whether the manager may patch the resource in every namespace.
	CanPatch(group, resource string) bool
	// CanWatch reports whether the manager may list and watch the resource in every namespace: what
	// the member tracker needs to track its objects.
	CanWatch(group, resource string) bool
}

// Request is what Mutate needs to know of the admission request besides the object.
type Request struct {
	GroupKind schema.GroupKind
	// Resource is the request's resource (group and plural name).
	Resource  schema.GroupResource
	Namespace string
	// NamespaceLabels are the labels of Namespace, when resolution needs them.
	NamespaceLabels map[string]string
	// Permissions is consulted before adding the teardown finalizer (nil adds none) and to warn about
	// members of kinds the manager may not track (nil warns about none).
	Permissions PermissionSource
	// Create is true for CREATE: scheduling gates can only be added when a pod is created.
	Create bool
	// OldLabels are the labels before an UPDATE (nil for CREATE).
	OldLabels map[string]string
	// Gates is consulted for pods; nil gates every member pod.
	Gates GateSource
	// TemplateFixed is true when the UPDATE may not change the object's pod template: a Job's is
	// immutable unless the Job is suspended and has never started.
	TemplateFixed bool
	// User is the requester's user name.
	User string
}

var (
	podGroupKind       = schema.GroupKind{Kind: "Pod"}
	namespaceGroupKind = schema.GroupKind{Kind: "Namespace"}
)

// Mutate returns the admission response for a decoded object: the patch operations that stamp the
// derived waves (or remove the teardown finalizer of a member an UPDATE takes out of its group), or
// a denial that names the field to fix. It is a pure function of its arguments.
func Mutate(obj *partialObject, req Request, idx *policy.Index) admission.Response {
	if req.GroupKind == namespaceGroupKind {
		return admission.Allowed("namespaces are not group members")
	}
	if req.GroupKind != podGroupKind && members.Skipped(req.Resource) {
		// Pods are not members either, but they are gated.
		return admission.Allowed("derived objects are not group members")
	}
	res, errs := resolve.Resolve(resolve.Object{Namespace: req.Namespace, NamespaceLabels: req.NamespaceLabels, Labels: obj.Labels}, idx)
	if res == nil && len(errs) == 0 {
		// No group label (any more). An UPDATE that takes a member out of its group releases it, even
		// while it is being deleted: nothing else would.
		if ops := release(obj, req, idx); len(ops) > 0 {
			return admission.Patched("", ops...).WithWarnings(fmt.Sprintf(
				"metadata.finalizers: removed %s; the object carries no group label any more, so wavegate no longer orders its deletion",
				keys.TeardownFinalizer))
		}
	}
	if obj.Deleting {
		// Never gated, annotated or finalized again.
		return admission.Allowed("being deleted")
	}
	if len(errs) > 0 {
		msg := errs.ToAggregate().Error()
		if req.GroupKind == podGroupKind {
			// A controller creates pods from a template admitted earlier: denying would stall it.
			return admission.Allowed("").WithWarnings("wavegate ignored this pod: " + msg)
		}
		if req.OldLabels != nil && maps.Equal(req.OldLabels, obj.Labels) {
			// Ratcheting, as Kubernetes validation does: labels that stopped resolving because a
			// policy changed must not block every later update (removing a finalizer, say).
			return admission.Allowed("").WithWarnings("wavegate ignored this object: " + msg)
		}
		return admission.Denied(msg)
	}
	if res == nil {
		return admission.Allowed("not a group member")
	}

	var warnings []string
	// A member in its own right (not a pod, not an object a controller made from a member's
	// template, not a claim a StatefulSet made) is ordered only if the member tracker can see it.
	_, claimOfTemplate := obj.Annotations[keys.ClaimTemplateAnnotation]
	if madeForStatefulSet(obj, req) {
		claimOfTemplate = true
	}
	member := req.GroupKind != podGroupKind && obj.Controller == "" && !claimOfTemplate
	if member && (req.Create || req.OldLabels != nil && !maps.Equal(req.OldLabels, obj.Labels)) {
		if w := untracked(req, res); w != "" {
			warnings = append(warnings, w)
		}
		if obj.DeadlinePath != "" {
			// The Job controller counts the deadline from the Job's start, gated pods or not.
			warnings = append(warnings, fmt.Sprintf("%s: the Job's deadline (%s s) counts from its start, including the time wavegate holds its pods "+
				"for the groups before %q; if they take longer, the Job fails with DeadlineExceeded before it runs, and so does its group. "+
				"Raise the deadline above what the earlier groups take (their timeouts), or recreate the Job if that happens",
				obj.DeadlinePath, obj.Deadline, res.Group))
		}
	}
	want := resolve.Annotations(res)
	if claimOfTemplate {
		want[keys.ClaimTemplateAnnotation] = "true"
	}
	wave := want[keys.ResolvedWaveAnnotation]
	have := obj.Annotations
	if cur, ok := have[keys.ArgoCDSyncWaveAnnotation]; ok && cur != wave && cur != have[keys.ResolvedWaveAnnotation] {
		warnings = append(warnings, fmt.Sprintf(
			"metadata.annotations[%s]: keeping the explicit sync-wave %s; wavegate derived %s from group %q (remove the annotation to use it)",
			keys.ArgoCDSyncWaveAnnotation, strconv.Quote(cur), wave, res.Group))
	} else {
		want[keys.ArgoCDSyncWaveAnnotation] = wave
	}
	ops := patch.SetEntries(nil, "/metadata/annotations", have, want)

	if tpl := obj.Template; tpl != nil {
		// Only a member in its own right has its template's stale identity removed: an object its
		// controller made (a CronJob's Job) takes its labels from the controller's template, not
		// from what the controller itself carries.
		tops, tw := templateOps(tpl, resolve.TemplateLabels(res, obj.Labels), obj.Controller == "")
		if len(tops) > 0 && req.TemplateFixed {
			// The API server would refuse the whole update (spec.template: field is immutable), and
			// every later one: the Job keeps its template, and its pods the labels they have.
			warnings = append(warnings, fmt.Sprintf("%s.metadata.labels: not stamped with group %q; a Job's pod template cannot change once the Job "+
				"has started or while it is not suspended, so its pods keep their labels (recreate the Job for its pods to be ordered with the group)",
				dottedPointer(tpl.Path), res.Group))
		} else {
			ops = append(ops, tops...)
			warnings = append(warnings, tw...)
		}
	}
	// Only members in their own right get the finalizer: a ReplicaSet inherits its Deployment's
	// labels but its Deployment is the member, and nothing would ever release it.
	if member && teardown.Ordered(res) && !slices.Contains(obj.Finalizers, keys.TeardownFinalizer) && mayFinalize(req) {
		if obj.HasFinalizers {
			ops = append(ops, jsonpatch.NewOperation("add", "/metadata/finalizers/-", keys.TeardownFinalizer))
		} else {
			ops = append(ops, jsonpatch.NewOperation("add", "/metadata/finalizers", []string{keys.TeardownFinalizer}))
		}
	}
	if req.GroupKind == podGroupKind && req.Create {
		// The pod's updates (the gate's removal among them) skip the webhook: its object selector
		// leaves out admitted pods, before the API server evaluates the match conditions (which
		// convert the old and the new pod for CEL on every update).
		labels := map[string]string{keys.AdmittedLabel: "true"}
		if _, ok := obj.Labels[keys.GroupLabel]; !ok {
			// A pod grouped only by a policy's label (a bare pod, an operator's, one of a template
			// admitted before its namespace opted in) carries the group in wavegate's label too: the
			// controller finds the pods it releases by that label.
			labels[keys.GroupLabel] = res.Group
		}
		ops = patch.SetEntries(ops, "/metadata/labels", obj.Labels, labels)
	}
	if req.GroupKind == podGroupKind && req.Create && !obj.Gated && obj.NodeName != "" {
		// Kubernetes refuses a pod created bound to a node with scheduling gates: gating it would
		// fail its creation, and its controller's retries, with an error that does not name wavegate.
		warnings = append(warnings, fmt.Sprintf("spec.nodeName: the pod is bound to node %q at creation, so wavegate cannot hold it with a scheduling gate "+
			"and it starts without waiting for the groups before %q; use a nodeSelector or node affinity instead for it to wait", obj.NodeName, res.Group))
	} else if req.GroupKind == podGroupKind && req.Create && !obj.Gated &&
		(req.Gates == nil || !req.Gates.Cleared(res.Sequence, res.Group, obj.templateToken())) {
		// Every new member pod waits for the controller, unless its template was already cleared:
		// the cache here may not have seen an earlier group that was created a moment ago.
		gate := map[string]string{"name": keys.SchedulingGate}
		if obj.HasGates {
			ops = append(ops, jsonpatch.NewOperation("add", "/spec/schedulingGates/-", gate))
		} else {
			ops = append(ops, jsonpatch.NewOperation("add", "/spec/schedulingGates", []any{gate}))
		}
	}
	if len(ops) == 0 {
		return admission.Allowed("").WithWarnings(warnings...)
	}
	return admission.Patched("", ops...).WithWarnings(warnings...)
}

// madeForStatefulSet reports whether a request creates a claim for a StatefulSet's
// volumeClaimTemplates: kube-controller-manager creates it, and no controller owns it (a generic
// ephemeral volume's is owned by its pod; one the StatefulSet deletes with itself,
// persistentVolumeClaimRetentionPolicy Delete, has owner references but no controller, and is
// marked too: the garbage collector deletes it, and it holds nothing meanwhile).
func madeForStatefulSet(obj *partialObject, req Request) bool {
	return req.Create && req.Resource == claimsResource && obj.Controller == "" &&
		(req.User == keys.StatefulSetControllerUser || req.User == keys.KubeControllerManagerUser)
}

var claimsResource = schema.GroupResource{Resource: "persistentvolumeclaims"}

// mayFinalize reports whether a wavegate controller could remove the teardown finalizer from an
// object of the request's resource: the manager may patch it, and the member tracker tracks it
// (list and watch), for the hold sees only tracked objects. Unknown permissions mean no.
func mayFinalize(req Request) bool {
	if req.Permissions == nil {
		return false
	}
	group, resource := req.Resource.Group, req.Resource.Resource
	return req.Permissions.CanPatch(group, resource) && req.Permissions.CanWatch(group, resource)
}

// untracked returns the warning for a member of a kind the manager is known not to be allowed to
// list and watch: the member tracker does not track it, so no group waits for it and the hold
// never sees it. "" when the kind is tracked, or while the permissions are not known yet (a
// replica that has just started must not warn about every object).
func untracked(req Request, res *resolve.Resolution) string {
	p := req.Permissions
	group, resource := req.Resource.Group, req.Resource.Resource
	if p == nil || !p.Ready() || p.CanWatch(group, resource) {
		return ""
	}
	verbs := "list and watch"
	if teardown.Ordered(res) && !p.CanPatch(group, resource) {
		verbs = "list, watch and patch"
	}
	return fmt.Sprintf("metadata.labels[%s]: wavegate may not list and watch %s, so this object is not ordered "+
		"(later groups do not wait for it, and its deletion does not wait for them): grant %s with a ClusterRole labeled %s=true",
		res.GroupLabel, req.Resource, verbs, keys.AggregateToManagerLabel)
}

// release returns the operations that remove wavegate's teardown finalizer from an object that an
// UPDATE takes out of its group: its old labels named a group (validly or not), its new ones name
// none. The member tracker selects objects by their group labels and never sees such an object
// again, so the hold could never release it: it would stay Terminating forever once deleted. An
// object whose old labels named no group either is left alone (an index that lags behind a new
// policy's group label must not strip a finalizer), and so is a pod (pods never get it). Each
// occurrence is tested and removed, the last first so that the indices hold; a second pass finds
// none.
func release(obj *partialObject, req Request, idx *policy.Index) []jsonpatch.Operation {
	if req.OldLabels == nil || req.GroupKind == podGroupKind || !slices.Contains(obj.Finalizers, keys.TeardownFinalizer) {
		return nil
	}
	old, errs := resolve.Resolve(resolve.Object{Namespace: req.Namespace, NamespaceLabels: req.NamespaceLabels, Labels: req.OldLabels}, idx)
	if old == nil && len(errs) == 0 {
		return nil
	}
	var ops []jsonpatch.Operation
	for i := len(obj.Finalizers) - 1; i >= 0; i-- {
		if obj.Finalizers[i] == keys.TeardownFinalizer {
			ops = append(ops, patch.TestAndRemove("/metadata/finalizers", i, keys.TeardownFinalizer)...)
		}
	}
	return ops
}

// templateOps returns the operations that make a pod template carry the group identity (labels,
// from resolve.TemplateLabels) and the warnings they come with. wavegate's identity labels that the
// owner no longer carries (its sequence, its group order) are removed: left in the template, they
// would put its new pods in another sequence, or make them fail to resolve and start ungated.
func templateOps(tpl *podTemplate, labels map[string]string, stale bool) ([]jsonpatch.Operation, []string) {
	if !tpl.HasMetadata {
		return []jsonpatch.Operation{jsonpatch.NewOperation("add", tpl.Path+"/metadata", map[string]any{"labels": labels})}, nil
	}
	ops := patch.SetEntries(nil, tpl.Path+"/metadata/labels", tpl.Labels, labels)
	var warnings []string
	for _, k := range []string{keys.SequenceLabel, keys.GroupOrderLabel, keys.AdmittedLabel, keys.WaitJobLabel} {
		if _, ok := tpl.Labels[k]; !ok {
			continue
		}
		skipsGate := k == keys.AdmittedLabel || k == keys.WaitJobLabel
		if _, ok := labels[k]; ok || !stale && !skipsGate {
			continue
		}
		ops = append(ops, jsonpatch.NewOperation("remove", patch.Pointer(tpl.Path+"/metadata/labels", k), nil))
		if skipsGate {
			// A pod created with either would skip the webhook (its object selector leaves them
			// out), and with it the gate.
			warnings = append(warnings, fmt.Sprintf("%s.metadata.labels[%s]: removed; wavegate sets it on the pods it admits or runs, and a pod created with it would not be gated",
				dottedPointer(tpl.Path), k))
			continue
		}
		// Said, so that a manifest that sets it on the template (an apply tool showing drift) is
		// fixed where it is written.
		warnings = append(warnings, fmt.Sprintf("%s.metadata.labels[%s]: removed; the object itself does not carry it, and its pods must join "+
			"the sequence and group order the object does (set it on the object's own labels to keep it)", dottedPointer(tpl.Path), k))
	}
	return ops, warnings
}

func dottedPointer(path string) string {
	return strings.ReplaceAll(strings.TrimPrefix(path, "/"), "/", ".")
}
