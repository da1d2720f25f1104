package mutate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fastjson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/resolve"
)

// DeletePath is where the webhook server serves the DELETE check.
const DeletePath = "/validate-wavegate-delete"

// +kubebuilder:webhook:path=/validate-wavegate-delete,mutating=false,failurePolicy=ignore,sideEffects=None,groups=*,resources=*,verbs=delete,versions=*,name=teardown.wavegate.io,admissionReviewVersions=v1,timeoutSeconds=5,matchPolicy=Equivalent

// LaterGroups tells which later groups of a sequence still have objects, as the Sequence status
// says.
type LaterGroups interface {
	// Later returns the later groups (order above order) that still have objects, how many, and
	// the resources of their objects; complete is false when some group does not list them.
	Later(sequence string, order int32) (groups []string, remaining int32, resources []string, complete bool)
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

// DeleteServer is the DELETE check of ordered teardown. It refuses, retryably (409 Conflict):
//
//   - a *foreground* DELETE of a group member while later groups of its sequence still have
//     objects: foreground deletion deletes the member's pods before the member, whatever
//     finalizers the member has, so the teardown finalizer cannot keep an operator running for its
//     custom resources;
//   - in a namespace that is being deleted, the DELETE of a running pod (or ReplicaSet) of a
//     workload whose group is held: the namespace controller deletes every pod and ReplicaSet of
//     the namespace directly, so the finalizer that keeps the Deployment object would not keep the
//     operator's process. The namespace controller retries with back-off (at most 60 s apart).
//
// Background deletion elsewhere (kubectl's default, Helm, Flux) is never refused: the finalizer
// orders it. The kubelet, eviction (its own subresource), node drain and rollouts are never
// refused: only deletions in a terminating namespace are, and never those of pods that are
// already terminating or those a node makes. The check is pure: it reads Sequence status and
// namespaces from memory, and before it refuses it confirms on a consistent read that the later
// groups' objects still exist (the Sequence status lags the API server by a reconcile, and Argo CD
// deletes the next wave the moment the last one is gone). It fails open (failurePolicy Ignore).
type DeleteServer struct {
	Policies   PolicySource
	Later      LaterGroups
	Namespaces NamespaceSource
	// Metadata reads the later groups' objects for the confirmation; nil trusts the status alone.
	Metadata metadata.Interface
	reviews  reviewReader
}

// confirmTimeout bounds the consistent read before a refusal (the webhook's timeout is 5 s).
const confirmTimeout = 3 * time.Second

// ServeHTTP implements http.Handler.
func (s *DeleteServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.reviews.serve(w, r, func(req *fastjson.Value) (types.UID, admission.Response) { return s.review(r.Context(), req) })
}

// heldWorkloads are the controllers whose pods (and, for a Deployment, ReplicaSets) teardown keeps
// while their namespace is deleted: the shapes an operator ships as.
var heldWorkloads = map[schema.GroupResource]map[string]bool{
	{Resource: "pods"}:                       {"ReplicaSet": true, "StatefulSet": true, "DaemonSet": true},
	{Group: "apps", Resource: "replicasets"}: {"Deployment": true},
}

func (s *DeleteServer) review(ctx context.Context, req *fastjson.Value) (types.UID, admission.Response) {
	uid := types.UID(req.GetStringBytes("uid"))
	if string(req.GetStringBytes("operation")) != "DELETE" {
		return uid, admission.Allowed("")
	}
	old := req.Get("oldObject")
	if old == nil || old.Type() != fastjson.TypeObject {
		return uid, admission.Allowed("")
	}
	idx := s.Policies.Index()
	if idx == nil {
		return uid, admission.Allowed("")
	}
	namespace := string(req.GetStringBytes("namespace"))
	resource := schema.GroupResource{Group: string(req.GetStringBytes("resource", "group")), Resource: string(req.GetStringBytes("resource", "resource"))}
	foreground := string(req.GetStringBytes("options", "propagationPolicy")) == string(metav1.DeletePropagationForeground)
	owners, held := heldWorkloads[resource]
	if !foreground && !held {
		return uid, admission.Allowed("")
	}
	gk := schema.GroupKind{Group: string(req.GetStringBytes("kind", "group")), Kind: string(req.GetStringBytes("kind", "kind"))}
	obj, err := decodeObject(old, gk)
	if err != nil {
		return uid, admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the object to delete: %w", err))
	}
	nsLabels, err := namespaceLabels(s.Namespaces, idx, namespace)
	if err != nil {
		return uid, admission.Allowed("") // fail open
	}
	res, errs := resolve.Resolve(resolve.Object{Namespace: namespace, NamespaceLabels: nsLabels, Labels: obj.Labels}, idx)
	if res == nil || len(errs) > 0 || !teardownOrdered(res) {
		return uid, admission.Allowed("")
	}
	if held && !foreground {
		// Only the namespace's own teardown is refused: not a rollout, not the kubelet, not a pod
		// that is already terminating, not a deletion outside a terminating namespace.
		user := string(req.GetStringBytes("userInfo", "username"))
		// The namespace controller deletes only in terminating namespaces: its identity (where
		// kube-controller-manager uses per-controller credentials) needs no cache.
		terminating := user == namespaceController || s.Namespaces != nil && s.Namespaces.Terminating(namespace)
		if obj.Deleting || !owners[obj.ControllerKind] || !terminating || strings.HasPrefix(user, "system:node:") {
			return uid, admission.Allowed("")
		}
	}
	groups, remaining, resources, complete := s.Later.Later(res.Sequence, res.GroupOrder)
	if remaining == 0 {
		return uid, admission.Allowed("")
	}
	if s.Metadata != nil && complete {
		ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
		defer cancel()
		live, n, err := s.confirm(ctx, idx, res.Sequence, res.GroupOrder, resources)
		switch {
		case err != nil:
			ctrl.LoggerFrom(ctx).Error(err, "Confirming the later groups on a consistent read; refusing as the Sequence status says",
				"sequence", res.Sequence, "group", res.Group)
		case n == 0:
			return uid, admission.Allowed("")
		default:
			groups, remaining = live, n
		}
	}
	var msg string
	if foreground {
		msg = fmt.Sprintf("wavegate: group %q of sequence %q is deleted after group(s) %s (%d objects remain); a foreground deletion would stop "+
			"its pods first. Retry once they are gone, or delete with --cascade=background (wavegate then holds it until they are gone)",
			res.Group, res.Sequence, strings.Join(groups, ", "), remaining)
	} else {
		msg = fmt.Sprintf("wavegate: namespace %s is being deleted; this %s of group %q (%s %s) keeps running until group(s) %s of sequence %q "+
			"are gone (%d objects remain), so that it can finalize them; the namespace's deletion retries by itself. "+
			"See `kubectl get sequence`; `wavegate uninstall` stops all ordering",
			namespace, gk.Kind, res.Group, obj.ControllerKind, obj.ControllerName, strings.Join(groups, ", "), res.Sequence, remaining)
	}
	resp := admission.Denied(msg)
	resp.Result.Code, resp.Result.Reason = http.StatusConflict, metav1.StatusReasonConflict
	return uid, resp
}

// namespaceController is the identity of kube-controller-manager's namespace controller.
const namespaceController = keys.NamespaceControllerUser

// namespaceLabels returns the labels of a namespace when resolution needs them.
func namespaceLabels(ns NamespaceSource, idx *policy.Index, namespace string) (map[string]string, error) {
	if namespace == "" || !idx.NeedsNamespaceLabels() {
		return nil, nil
	}
	if ns == nil {
		return nil, errors.New("no namespace source")
	}
	return ns.Labels(namespace)
}

// confirm counts, on a consistent read of the given resources, the objects of a sequence's groups
// after order that still exist, resolved as admission resolves them.
func (s *DeleteServer) confirm(ctx context.Context, idx *policy.Index, seq string, order int32, resources []string) ([]string, int32, error) {
	kinds := make([]members.Kind, 0, len(resources))
	for _, r := range resources {
		gvr, err := members.ParseResource(r)
		if err != nil {
			return nil, 0, err
		}
		kinds = append(kinds, members.Kind{GVR: gvr})
	}
	objs, err := members.ListMembers(ctx, s.Metadata, kinds, idx.GroupLabels(), seq, "")
	if err != nil {
		return nil, 0, err
	}
	groups := map[string]bool{}
	var n int32
	for _, o := range objs {
		ns := o.GetNamespace()
		var nsLabels map[string]string
		if ns != "" && s.Namespaces != nil {
			if nsLabels, err = s.Namespaces.Labels(ns); err != nil {
				return nil, 0, err
			}
			if nsLabels[keys.EnabledLabel] != "true" {
				continue // the controllers order only opted-in namespaces
			}
		}
		res, errs := resolve.Resolve(resolve.Object{Namespace: ns, NamespaceLabels: nsLabels, Labels: o.GetLabels()}, idx)
		if res == nil || len(errs) > 0 || res.Sequence != seq || res.GroupOrder <= order {
			continue
		}
		groups[res.Group] = true
		n++
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	slices.Sort(names)
	return names, n, nil
}

var errNoRequest = errors.New("the AdmissionReview has no request")
