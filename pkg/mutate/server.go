package mutate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/valyala/fastjson"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"wavegate.io/wavegate/pkg/teardown"
)

// maxReviewBytes bounds a request body, as controller-runtime does. The API server itself refuses
// objects over 3 MiB, so a larger review is not from it.
const maxReviewBytes = 7 << 20

// Server serves AdmissionReviews over HTTP. It reads a review with a single validating JSON parse
// and only the fields wavegate needs, instead of decoding the whole object several times as a
// generic decoder does: the review path is on the critical path of every labeled object and pod.
type Server struct {
	Policies PolicySource
	// Gates tells which pod templates start without a gate; nil gates every member pod.
	Gates GateSource
	// Permissions tells which kinds may carry the teardown finalizer and which the member tracker
	// tracks; nil adds no finalizer and warns about no kind.
	Permissions PermissionSource
	// Namespaces gives namespace labels where policies select namespaces.
	Namespaces NamespaceSource

	reviews reviewReader
}

// reviewReader reads AdmissionReviews with pooled buffers and parsers and writes the answers.
type reviewReader struct {
	parsers fastjson.ParserPool
	buffers sync.Pool
}

var _ http.Handler = &Server{}

// ServeHTTP implements http.Handler. Every answer is an AdmissionReview; garbage gets a denial
// with a 4xx code, never a panic.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.reviews.serve(w, r, s.review)
}

// serve reads one review, lets review answer its request and writes the answer.
func (rr *reviewReader) serve(w http.ResponseWriter, r *http.Request, review func(*fastjson.Value) admission.Response) {
	buf, _ := rr.buffers.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	defer func() { buf.Reset(); rr.buffers.Put(buf) }()

	var resp admission.Response
	uid := types.UID("")
	func() {
		defer func() {
			if p := recover(); p != nil {
				ctrl.Log.Error(fmt.Errorf("%v", p), "Panic while reviewing", "uid", uid)
				resp = admission.Errored(http.StatusInternalServerError, fmt.Errorf("wavegate failed to review the object"))
			}
		}()
		p := rr.parsers.Get()
		defer rr.parsers.Put(p)
		req, err := readReview(r, buf, p)
		if err != nil {
			resp = err.(statusError).resp
			uid = err.(statusError).uid
			return
		}
		// Known before the review runs: a panic in it is still answered for this request.
		uid = types.UID(req.GetStringBytes("uid"))
		resp = review(req)
	}()
	resp.UID = uid
	if len(resp.Patches) > 0 {
		patch, err := json.Marshal(resp.Patches)
		if err != nil {
			resp = admission.Errored(http.StatusInternalServerError, fmt.Errorf("encoding the patch: %w", err))
			resp.UID = uid
		} else {
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
	}
	out := admissionv1.AdmissionReview{Response: &resp.AdmissionResponse}
	out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&out); err != nil {
		ctrl.Log.Error(err, "Writing the admission response", "uid", uid)
	}
}

// statusError is a review that cannot be answered, with the answer to give instead.
type statusError struct {
	uid  types.UID
	resp admission.Response
}

func (e statusError) Error() string { return e.resp.Result.Message }

func fail(uid types.UID, code int32, err error) statusError {
	return statusError{uid, admission.Errored(code, err)}
}

// readReview reads and parses an AdmissionReview and returns its request.
func readReview(r *http.Request, buf *bytes.Buffer, p *fastjson.Parser) (*fastjson.Value, error) {
	if r.Method != http.MethodPost {
		return nil, fail("", http.StatusMethodNotAllowed, fmt.Errorf("use POST, not %s", r.Method))
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return nil, fail("", http.StatusUnsupportedMediaType, fmt.Errorf("content type %q is not application/json", ct))
	}
	if r.Body == nil {
		return nil, fail("", http.StatusBadRequest, errors.New("the request has no body"))
	}
	n, err := buf.ReadFrom(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil {
		return nil, fail("", http.StatusBadRequest, fmt.Errorf("reading the request: %w", err))
	}
	if n > maxReviewBytes {
		return nil, fail("", http.StatusRequestEntityTooLarge, fmt.Errorf("the request is larger than %d bytes", maxReviewBytes))
	}
	v, err := parseDeep(p, buf.Bytes())
	if err != nil {
		return nil, fail("", http.StatusBadRequest, fmt.Errorf("the request is not JSON: %w", err))
	}
	if api, kind := string(v.GetStringBytes("apiVersion")), string(v.GetStringBytes("kind")); api != "admission.k8s.io/v1" || kind != "AdmissionReview" {
		return nil, fail("", http.StatusBadRequest, fmt.Errorf("expected an admission.k8s.io/v1 AdmissionReview, got %q %q", api, kind))
	}
	req := v.Get("request")
	if req == nil || req.Type() != fastjson.TypeObject {
		return nil, fail("", http.StatusBadRequest, errNoRequest)
	}
	uid := types.UID(req.GetStringBytes("uid"))
	if uid == "" {
		return nil, fail("", http.StatusBadRequest, errors.New("the AdmissionReview's request has no uid"))
	}
	if string(req.GetStringBytes("operation")) == "" {
		return nil, fail(uid, http.StatusBadRequest, errors.New("the AdmissionReview's request has no operation"))
	}
	return req, nil
}

func (s *Server) review(req *fastjson.Value) admission.Response {
	op := string(req.GetStringBytes("operation"))
	if op != string(admissionv1.Create) && op != string(admissionv1.Update) {
		return admission.Allowed("wavegate only mutates CREATE and UPDATE")
	}
	gk := schema.GroupKind{Group: string(req.GetStringBytes("kind", "group")), Kind: string(req.GetStringBytes("kind", "kind"))}
	namespace, name := string(req.GetStringBytes("namespace")), string(req.GetStringBytes("name"))
	raw := req.Get("object")
	if raw == nil || raw.Type() == fastjson.TypeNull {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("the AdmissionReview for %s has no object", gk.Kind))
	}
	idx := s.Policies.Index()
	if idx == nil {
		return admission.Errored(http.StatusServiceUnavailable, errors.New("wavegate has not loaded its WavePolicies yet; retry"))
	}
	obj, err := decodeObject(raw, gk)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding %s %s: %w", gk.Kind, klog.KRef(namespace, name), err))
	}
	var oldLabels map[string]string
	templateFixed := false
	if op == string(admissionv1.Update) {
		old := req.Get("oldObject")
		if old == nil || old.Type() != fastjson.TypeObject {
			// The API server always sends it: without it, a label change would go unseen (the
			// ratchet, the release of a member leaving its group).
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("the AdmissionReview's request.oldObject for the UPDATE of %s %s is missing or not an object", gk.Kind, klog.KRef(namespace, name)))
		}
		if oldLabels, err = stringMap(old, "metadata", "labels"); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the old %s %s: %w", gk.Kind, klog.KRef(namespace, name), err))
		}
		if oldLabels == nil {
			oldLabels = map[string]string{}
		}
		templateFixed = gk == jobGroupKind && !mayChangeJobTemplate(old)
	}
	resource := schema.GroupResource{Group: string(req.GetStringBytes("resource", "group")), Resource: string(req.GetStringBytes("resource", "resource"))}
	nsLabels, err := teardown.NamespaceLabels(s.Namespaces, idx, namespace)
	if err != nil {
		return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("reading namespace %s: %w; retry", namespace, err))
	}
	resp := Mutate(obj, Request{GroupKind: gk, Resource: resource, Namespace: namespace, NamespaceLabels: nsLabels,
		Create: op == string(admissionv1.Create), OldLabels: oldLabels, TemplateFixed: templateFixed, Gates: s.Gates, Permissions: s.Permissions,
		User: string(req.GetStringBytes("userInfo", "username"))}, idx)
	if !resp.Allowed {
		ctrl.Log.V(1).Info("Denied", "kind", gk.Kind, "object", klog.KRef(namespace, name), "reason", resp.Result.Message)
	}
	return resp
}

var jobGroupKind = schema.GroupKind{Group: "batch", Kind: "Job"}

// mayChangeJobTemplate reports whether the API server lets an UPDATE change the labels of a Job's
// pod template, given the Job before it: only while it is suspended and has never started
// (k8s.io/kubernetes pkg/registry/batch/job: AllowMutableSchedulingDirectives; 1.36 also allows it
// for a Job suspended again with no active pods, which this leaves out). Otherwise the template is
// immutable, and a patch that stamps it would fail the whole update.
func mayChangeJobTemplate(old *fastjson.Value) bool {
	started := old.Get("status", "startTime")
	return old.GetBool("spec", "suspend") && (started == nil || started.Type() == fastjson.TypeNull)
}
