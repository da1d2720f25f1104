package mutate

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/valyala/fastjson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"wavegate.io/wavegate/pkg/teardown"
)

// DeletePath is where the webhook server serves the DELETE check.
const DeletePath = "/validate-wavegate-delete"

// +kubebuilder:webhook:path=/validate-wavegate-delete,mutating=false,failurePolicy=ignore,sideEffects=None,groups=*,resources=*,verbs=delete,versions=*,name=teardown.wavegate.io,admissionReviewVersions=v1,timeoutSeconds=5,matchPolicy=Equivalent

// NamespaceSource reads namespaces from the manager's cache (a namespace the cache has not seen yet
// with one GET).
type NamespaceSource = teardown.NamespaceSource

// DeleteServer serves ordered teardown's DELETE check (teardown.Check) as a validating webhook:
// it reads the AdmissionReview and answers a refusal with 409 Conflict, which clients and the
// namespace controller retry.
type DeleteServer struct {
	Policies PolicySource
	Check    *teardown.Check
	reviews  reviewReader
}

// ServeHTTP implements http.Handler.
func (s *DeleteServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.reviews.serve(w, r, func(req *fastjson.Value) admission.Response { return s.review(r.Context(), req) })
}

func (s *DeleteServer) review(ctx context.Context, req *fastjson.Value) admission.Response {
	if string(req.GetStringBytes("operation")) != "DELETE" {
		return admission.Allowed("")
	}
	old := req.Get("oldObject")
	if old == nil || old.Type() != fastjson.TypeObject {
		return admission.Allowed("")
	}
	idx := s.Policies.Index()
	resource := schema.GroupResource{Group: string(req.GetStringBytes("resource", "group")), Resource: string(req.GetStringBytes("resource", "resource"))}
	foreground := string(req.GetStringBytes("options", "propagationPolicy")) == string(metav1.DeletePropagationForeground)
	user := string(req.GetStringBytes("userInfo", "username"))
	if idx == nil || !teardown.Relevant(resource, foreground, user) {
		return admission.Allowed("")
	}
	gk := schema.GroupKind{Group: string(req.GetStringBytes("kind", "group")), Kind: string(req.GetStringBytes("kind", "kind"))}
	obj, err := decodeObject(old, gk)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the object to delete: %w", err))
	}
	msg := s.Check.Refuse(ctx, idx, teardown.Deletion{
		Namespace: string(req.GetStringBytes("namespace")), Name: string(old.GetStringBytes("metadata", "name")),
		Version: string(req.GetStringBytes("resource", "version")), Resource: resource, Kind: gk.Kind, Foreground: foreground,
		User: user, Labels: obj.Labels, Deleting: obj.Deleting,
		ControllerKind: obj.ControllerKind, ControllerName: obj.ControllerName, Claims: claims(old, resource),
	})
	if msg == "" {
		return admission.Allowed("")
	}
	resp := admission.Denied(msg)
	resp.Result.Code, resp.Result.Reason = http.StatusConflict, metav1.StatusReasonConflict
	return resp
}

// claims returns the PersistentVolumeClaims a pod mounts: by name, and its generic ephemeral
// volumes' (<pod>-<volume>).
func claims(pod *fastjson.Value, resource schema.GroupResource) []string {
	if resource != (schema.GroupResource{Resource: "pods"}) {
		return nil
	}
	var out []string
	for _, v := range pod.GetArray("spec", "volumes") {
		if name := v.GetStringBytes("persistentVolumeClaim", "claimName"); len(name) > 0 {
			out = append(out, string(name))
		} else if v.Exists("ephemeral") {
			out = append(out, string(pod.GetStringBytes("metadata", "name"))+"-"+string(v.GetStringBytes("name")))
		}
	}
	return out
}

var errNoRequest = errors.New("the AdmissionReview has no request")
