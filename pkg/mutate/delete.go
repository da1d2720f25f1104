package mutate

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/valyala/fastjson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"wavegate.io/wavegate/pkg/resolve"
)

// DeletePath is where the webhook server serves the DELETE check.
const DeletePath = "/validate-wavegate-delete"

// +kubebuilder:webhook:path=/validate-wavegate-delete,mutating=false,failurePolicy=ignore,sideEffects=None,groups=*,resources=*,verbs=delete,versions=*,name=teardown.wavegate.io,admissionReviewVersions=v1,timeoutSeconds=5,matchPolicy=Equivalent

// LaterGroups tells which later groups of a sequence still have objects.
type LaterGroups interface {
	// Later returns the later groups (order above order) that still have objects, and how many.
	Later(sequence string, order int32) (groups []string, remaining int32)
}

// DeleteServer refuses a *foreground* DELETE of a group member while later groups of its sequence
// still have objects. Foreground deletion deletes the member's pods before the member, whatever
// finalizers the member has, so the cleanup finalizer cannot keep an operator running for its
// custom resources. Background deletion (kubectl's default, Helm, Flux, namespace deletion) is
// never refused: the finalizer orders it. The check is pure: it reads Sequence status from memory.
type DeleteServer struct {
	Policies PolicySource
	Later    LaterGroups
	reviews  reviewReader
}

// ServeHTTP implements http.Handler.
func (s *DeleteServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.reviews.serve(w, r, s.review)
}

func (s *DeleteServer) review(req *fastjson.Value) (types.UID, admission.Response) {
	uid := types.UID(req.GetStringBytes("uid"))
	if string(req.GetStringBytes("operation")) != "DELETE" {
		return uid, admission.Allowed("")
	}
	if policy := string(req.GetStringBytes("options", "propagationPolicy")); policy != "Foreground" {
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
	gk := schema.GroupKind{Group: string(req.GetStringBytes("kind", "group")), Kind: string(req.GetStringBytes("kind", "kind"))}
	obj, err := decodeObject(old, gk)
	if err != nil {
		return uid, admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the object to delete: %w", err))
	}
	res, errs := resolve.Resolve(resolve.Object{Namespace: string(req.GetStringBytes("namespace")), Labels: obj.Labels}, idx)
	if res == nil || len(errs) > 0 || !teardownOrdered(res) {
		return uid, admission.Allowed("")
	}
	groups, remaining := s.Later.Later(res.Sequence, res.GroupOrder)
	if remaining == 0 {
		return uid, admission.Allowed("")
	}
	resp := admission.Denied(fmt.Sprintf(
		"wavegate: group %q of sequence %q is deleted after group(s) %s (%d objects remain); a foreground deletion would stop "+
			"its pods first. Retry once they are gone, or delete with --cascade=background (wavegate then holds it until they are gone)",
		res.Group, res.Sequence, strings.Join(groups, ", "), remaining))
	resp.Result.Code, resp.Result.Reason = http.StatusConflict, metav1.StatusReasonConflict
	return uid, resp
}

var errNoRequest = errors.New("the AdmissionReview has no request")
