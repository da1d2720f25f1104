// Package mutate is wavegate's mutating admission webhook. It stamps the derived waves and group
// identity on group members. It is pure: it reads the compiled policies from memory, never calls
// the API server and never creates objects, so it is safe under server-side dry-run.
package mutate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/resolve"
)

// Path is where the webhook server serves the handler.
const Path = "/mutate-wavegate"

// The webhook configuration is generated from this marker; config/webhook adds the namespace and
// object selectors that controller-gen cannot express.
// +kubebuilder:webhook:path=/mutate-wavegate,mutating=true,failurePolicy=fail,sideEffects=None,groups=*,resources=*,verbs=create;update,versions=*,name=objects.wavegate.io,admissionReviewVersions=v1,timeoutSeconds=5,reinvocationPolicy=IfNeeded,matchPolicy=Equivalent

// PolicySource serves the compiled policies.
type PolicySource interface {
	// Index returns the current policies, or nil while they are not loaded yet.
	Index() *policy.Index
}

// Handler mutates group members at admission.
type Handler struct {
	Policies PolicySource
}

var _ admission.Handler = &Handler{}

// Handle implements admission.Handler.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	if len(req.Object.Raw) == 0 {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("the AdmissionReview for %s has no object", req.Kind.Kind))
	}
	idx := h.Policies.Index()
	if idx == nil {
		return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("wavegate has not loaded its WavePolicies yet; retry"))
	}
	var obj partialObject
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding %s %s: %w", req.Kind.Kind, klog.KRef(req.Namespace, req.Name), err))
	}
	resp := Mutate(&obj, Request{
		GroupKind: schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind},
		Namespace: req.Namespace,
	}, idx)
	if !resp.Allowed {
		ctrl.LoggerFrom(ctx).V(1).Info("Denied", "kind", req.Kind.Kind, "object", klog.KRef(req.Namespace, req.Name), "reason", resp.Result.Message)
	}
	return resp
}

// Request is what Mutate needs to know of the admission request besides the object.
type Request struct {
	GroupKind schema.GroupKind
	Namespace string
}

// Mutate returns the admission response for a decoded object: the patch operations that stamp the
// derived waves, or a denial that names the field to fix.
func Mutate(obj *partialObject, req Request, idx *policy.Index) admission.Response {
	if obj.Metadata.DeletionTimestamp != nil {
		return admission.Allowed("being deleted")
	}
	if req.GroupKind == (schema.GroupKind{Kind: "Namespace"}) {
		return admission.Allowed("namespaces are not group members")
	}
	res, errs := resolve.Resolve(resolve.Object{Namespace: req.Namespace, Labels: obj.Metadata.Labels}, idx)
	if len(errs) > 0 {
		msg := errs.ToAggregate().Error()
		if req.GroupKind == (schema.GroupKind{Kind: "Pod"}) {
			// A controller creates pods from a template admitted earlier: denying would stall it.
			return admission.Allowed("").WithWarnings("wavegate ignored this pod: " + msg)
		}
		return admission.Denied(msg)
	}
	if res == nil {
		return admission.Allowed("not a group member")
	}

	var warnings []string
	want := resolve.Annotations(res)
	wave := want[keys.ResolvedWaveAnnotation]
	have := obj.Metadata.Annotations
	if cur, ok := have[keys.ArgoCDSyncWaveAnnotation]; ok && cur != wave && cur != have[keys.ResolvedWaveAnnotation] {
		warnings = append(warnings, fmt.Sprintf(
			"metadata.annotations[%s]: keeping the explicit sync-wave %s; wavegate derived %s from group %q (remove the annotation to use it)",
			keys.ArgoCDSyncWaveAnnotation, strconv.Quote(cur), wave, res.Group))
	} else {
		want[keys.ArgoCDSyncWaveAnnotation] = wave
	}
	ops := setEntries(nil, "/metadata/annotations", have, want)

	if tpl, path := obj.template(req.GroupKind); tpl != nil {
		labels := resolve.TemplateLabels(res, obj.Metadata.Labels)
		switch {
		case tpl.Metadata == nil:
			ops = append(ops, jsonpatch.NewOperation("add", path+"/metadata", map[string]any{"labels": labels}))
		default:
			ops = setEntries(ops, path+"/metadata/labels", tpl.Metadata.Labels, labels)
		}
	}
	if len(ops) == 0 {
		return admission.Allowed("").WithWarnings(warnings...)
	}
	return admission.Patched("", ops...).WithWarnings(warnings...)
}
