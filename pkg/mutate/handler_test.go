package mutate

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fastjson"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/policy"
)

var (
	deploymentGK = schema.GroupKind{Group: "apps", Kind: "Deployment"}
	cronJobGK    = schema.GroupKind{Group: "batch", Kind: "CronJob"}
	jobGK        = schema.GroupKind{Group: "batch", Kind: "Job"}
	configMapGK  = schema.GroupKind{Kind: "ConfigMap"}
	podGK        = schema.GroupKind{Kind: "Pod"}
	claimGK      = schema.GroupKind{Kind: "PersistentVolumeClaim"}
)

func meta(labels, annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: "x", Namespace: "shop", Labels: labels, Annotations: annotations}
}

// deployment is a Deployment of pods labeled app=web and templateLabels (key, value pairs).
func deployment(labels, annotations map[string]string, templateLabels ...string) *appsv1.Deployment {
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta(labels, annotations),
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: with(map[string]string{"app": "web"}, templateLabels...)},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}
}

// admit runs Mutate on obj and returns the response and the patched object as a generic map.
func admit(t *testing.T, obj runtime.Object, gk schema.GroupKind, idx *policy.Index, opts ...func(*Request)) (admission.Response, []byte) {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{GroupKind: gk, Namespace: "shop"}
	for _, o := range opts {
		o(&req)
	}
	resp := Mutate(parse(t, raw, gk), req, idx)
	return resp, applied(t, raw, resp)
}

// applied returns raw with the response's patch applied (raw itself when it has none).
func applied(t *testing.T, raw []byte, resp admission.Response) []byte {
	t.Helper()
	if len(resp.Patches) == 0 {
		return raw
	}
	patch, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("applying %s: %v", patch, err)
	}
	return out
}

func parse(t *testing.T, raw []byte, gk schema.GroupKind) *partialObject {
	t.Helper()
	v, err := fastjson.ParseBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	o, err := decodeObject(v, gk)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

type observed struct {
	Annotations    map[string]string
	TemplateLabels map[string]string
	Warnings       []string
}

func observe(t *testing.T, gk schema.GroupKind, raw []byte, resp admission.Response) observed {
	t.Helper()
	o := parse(t, raw, gk)
	got := observed{Annotations: o.Annotations, Warnings: resp.Warnings}
	if o.Template != nil {
		got.TemplateLabels = o.Template.Labels
	}
	return got
}

func resolved(seq, group, groupOrder, wave string) map[string]string {
	return map[string]string{
		keys.ResolvedSequenceAnnotation: seq, keys.ResolvedGroupAnnotation: group,
		keys.ResolvedGroupOrderAnnotation: groupOrder, keys.ResolvedWaveAnnotation: wave,
	}
}

func with(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestMutate(t *testing.T) {
	web := map[string]string{keys.GroupLabel: "web", keys.GroupOrderLabel: "3", keys.OrderLabel: "1"}
	idx := policy.Compile([]wavev1.WavePolicy{{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       wavev1.WavePolicySpec{GroupLabel: "app.kubernetes.io/component", Groups: []wavev1.GroupSpec{{Name: "database", Order: 1}}},
	}})
	cases := map[string]struct {
		obj  runtime.Object
		gk   schema.GroupKind
		req  func(*Request)
		want observed
	}{
		"configmap without annotations": {
			obj:  &corev1.ConfigMap{ObjectMeta: meta(web, nil)},
			gk:   configMapGK,
			want: observed{Annotations: with(resolved("shop", "web", "3", "301"), keys.ArgoCDSyncWaveAnnotation, "301")},
		},
		"deployment: annotations and template labels": {
			obj: deployment(web, map[string]string{"owner": "team-a"}),
			gk:  deploymentGK,
			want: observed{
				Annotations:    with(resolved("shop", "web", "3", "301"), keys.ArgoCDSyncWaveAnnotation, "301", "owner", "team-a"),
				TemplateLabels: map[string]string{"app": "web", keys.GroupLabel: "web", keys.GroupOrderLabel: "3"},
			},
		},
		"deployment grouped by the policy's label": {
			obj: deployment(map[string]string{"app.kubernetes.io/component": "database"}, nil),
			gk:  deploymentGK,
			want: observed{
				Annotations:    with(resolved("shop", "database", "1", "100"), keys.ArgoCDSyncWaveAnnotation, "100"),
				TemplateLabels: map[string]string{"app": "web", keys.GroupLabel: "database"},
			},
		},
		"a template never carries the admitted label": {
			obj: deployment(web, nil, keys.AdmittedLabel, "true"),
			gk:  deploymentGK,
			want: observed{
				Annotations:    with(resolved("shop", "web", "3", "301"), keys.ArgoCDSyncWaveAnnotation, "301"),
				TemplateLabels: map[string]string{"app": "web", keys.GroupLabel: "web", keys.GroupOrderLabel: "3"},
				Warnings: []string{"spec.template.metadata.labels[wavegate.io/admitted]: removed; wavegate sets it on the pods it admits or runs, " +
					"and a pod created with it would not be gated"},
			},
		},
		// Nor the wait-Job label: the webhook's object selector leaves out pods carrying it.
		"a member's template never carries the wait-Job label": {
			obj: deployment(web, nil, keys.WaitJobLabel, "true"),
			gk:  deploymentGK,
			want: observed{
				Annotations:    with(resolved("shop", "web", "3", "301"), keys.ArgoCDSyncWaveAnnotation, "301"),
				TemplateLabels: map[string]string{"app": "web", keys.GroupLabel: "web", keys.GroupOrderLabel: "3"},
				Warnings: []string{"spec.template.metadata.labels[wavegate.io/wait-job]: removed; wavegate sets it on the pods it admits or runs, " +
					"and a pod created with it would not be gated"},
			},
		},
		"job without template metadata": {
			obj: &batchv1.Job{ObjectMeta: meta(web, nil), Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever}}}},
			gk: jobGK,
			want: observed{
				Annotations:    with(resolved("shop", "web", "3", "301"), keys.ArgoCDSyncWaveAnnotation, "301"),
				TemplateLabels: map[string]string{keys.GroupLabel: "web", keys.GroupOrderLabel: "3"},
			},
		},
		"a started job's template is left as it is, with a warning": {
			obj: &batchv1.Job{ObjectMeta: meta(web, nil), Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever}}}},
			gk:  jobGK,
			req: func(r *Request) { r.OldLabels, r.TemplateFixed = map[string]string{}, true },
			want: observed{
				Annotations:    with(resolved("shop", "web", "3", "301"), keys.ArgoCDSyncWaveAnnotation, "301"),
				TemplateLabels: map[string]string{"a": "b"},
				Warnings: []string{`spec.template.metadata.labels: not stamped with group "web"; a Job's pod template cannot change once the Job ` +
					`has started or while it is not suspended, so its pods keep their labels (recreate the Job for its pods to be ordered with the group)`},
			},
		},
		"a template loses the sequence and group order its owner no longer names": {
			obj: deployment(map[string]string{"app.kubernetes.io/component": "database"}, nil,
				keys.GroupLabel, "database", keys.GroupOrderLabel, "3", keys.SequenceLabel, "shop.old"),
			gk: deploymentGK,
			want: observed{
				Annotations:    with(resolved("shop", "database", "1", "100"), keys.ArgoCDSyncWaveAnnotation, "100"),
				TemplateLabels: map[string]string{"app": "web", keys.GroupLabel: "database"},
				Warnings: []string{
					"spec.template.metadata.labels[wavegate.io/sequence]: removed; the object itself does not carry it, and its pods must join " +
						"the sequence and group order the object does (set it on the object's own labels to keep it)",
					"spec.template.metadata.labels[wavegate.io/group-order]: removed; the object itself does not carry it, and its pods must join " +
						"the sequence and group order the object does (set it on the object's own labels to keep it)",
				},
			},
		},
		// A CronJob's Job takes its labels from the CronJob's jobTemplate, its pod template from the
		// CronJob's: the Job does not carry the sequence its pods were stamped with.
		"a controller's object keeps its template's identity": {
			obj: &batchv1.Job{ObjectMeta: func() metav1.ObjectMeta {
				m := meta(map[string]string{"app.kubernetes.io/component": "database"}, nil)
				m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: "nightly", UID: "cron", Controller: ptr.To(true)}}
				return m
			}(), Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{keys.GroupLabel: "database", keys.SequenceLabel: "shop.batch"}},
				Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever}}}},
			gk: jobGK,
			want: observed{
				Annotations:    with(resolved("shop", "database", "1", "100"), keys.ArgoCDSyncWaveAnnotation, "100"),
				TemplateLabels: map[string]string{keys.GroupLabel: "database", keys.SequenceLabel: "shop.batch"},
			},
		},
		"cronjob template": {
			obj: &batchv1.CronJob{ObjectMeta: meta(web, nil), Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}}}}}}},
			gk: cronJobGK,
			want: observed{
				Annotations:    with(resolved("shop", "web", "3", "301"), keys.ArgoCDSyncWaveAnnotation, "301"),
				TemplateLabels: map[string]string{"a": "b", keys.GroupLabel: "web", keys.GroupOrderLabel: "3"},
			},
		},
		"explicit sync-wave is kept with a warning": {
			obj: &corev1.ConfigMap{ObjectMeta: meta(web, map[string]string{keys.ArgoCDSyncWaveAnnotation: "5"})},
			gk:  configMapGK,
			want: observed{
				Annotations: with(resolved("shop", "web", "3", "301"), keys.ArgoCDSyncWaveAnnotation, "5"),
				Warnings: []string{`metadata.annotations[argocd.argoproj.io/sync-wave]: keeping the explicit sync-wave "5"; ` +
					`wavegate derived 301 from group "web" (remove the annotation to use it)`},
			},
		},
		"sync-wave that wavegate stamped follows a new order": {
			obj:  &corev1.ConfigMap{ObjectMeta: meta(web, with(resolved("shop", "web", "2", "201"), keys.ArgoCDSyncWaveAnnotation, "201"))},
			gk:   configMapGK,
			want: observed{Annotations: with(resolved("shop", "web", "3", "301"), keys.ArgoCDSyncWaveAnnotation, "301")},
		},
		"unknown kinds get annotations only": {
			obj: &unstructuredLike{APIVersion: "example.com/v1", Kind: "Widget", Metadata: meta(web, nil)},
			gk:  schema.GroupKind{Group: "example.com", Kind: "Widget"},
			want: observed{
				Annotations: with(resolved("shop", "web", "3", "301"), keys.ArgoCDSyncWaveAnnotation, "301"),
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var opts []func(*Request)
			if tc.req != nil {
				opts = append(opts, tc.req)
			}
			resp, out := admit(t, tc.obj, tc.gk, idx, opts...)
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			if diff := cmp.Diff(tc.want, observe(t, tc.gk, out, resp)); diff != "" {
				t.Errorf("after admission (-want,+got):\n%s", diff)
			}
			// A second pass over the webhook's own output must not change anything.
			var again runtime.Object = &rawObject{raw: out}
			resp2, _ := admit(t, again, tc.gk, idx, opts...)
			if len(resp2.Patches) != 0 {
				t.Errorf("second pass patched again: %+v", resp2.Patches)
			}
		})
	}
}

func TestMutateSkipsAndDenials(t *testing.T) {
	cases := map[string]struct {
		obj         runtime.Object
		gk          schema.GroupKind
		wantAllowed bool
		wantMessage string
		wantWarning string
	}{
		"not a member": {
			obj: &corev1.ConfigMap{ObjectMeta: meta(map[string]string{"a": "b"}, nil)}, gk: configMapGK,
			wantAllowed: true, wantMessage: "not a group member",
		},
		"being deleted": {
			obj: &corev1.ConfigMap{ObjectMeta: func() metav1.ObjectMeta {
				m := meta(map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "1"}, nil)
				now := metav1.Now()
				m.DeletionTimestamp = &now
				return m
			}()}, gk: configMapGK,
			wantAllowed: true, wantMessage: "being deleted",
		},
		"bad order is denied naming the label": {
			obj: &corev1.ConfigMap{ObjectMeta: meta(map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "one"}, nil)}, gk: configMapGK,
			wantMessage: `metadata.labels[wavegate.io/group-order]: Invalid value: "one": must be an integer from -1000 to 1000; fix or remove the label`,
		},
		"a pod with bad labels is admitted with a warning": {
			obj: &corev1.Pod{ObjectMeta: meta(map[string]string{keys.GroupLabel: "db"}, nil)}, gk: podGK,
			wantAllowed: true,
			wantWarning: `wavegate ignored this pod: metadata.labels[wavegate.io/group-order]: Required value: group "db" has no order`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			resp, _ := admit(t, tc.obj, tc.gk, nil)
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed = %v, want %v (%v)", resp.Allowed, tc.wantAllowed, resp.Result)
			}
			if len(resp.Patches) != 0 {
				t.Errorf("unexpected patches %v", resp.Patches)
			}
			if tc.wantMessage != "" && (resp.Result == nil || !strings.Contains(resp.Result.Message, tc.wantMessage)) {
				t.Errorf("message = %v, want it to contain %q", resp.Result, tc.wantMessage)
			}
			if tc.wantWarning != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], tc.wantWarning)) {
				t.Errorf("warnings = %q, want one containing %q", resp.Warnings, tc.wantWarning)
			}
		})
	}
}

// TestServeHTTP drives the handler through controller-runtime's webhook HTTP handling: the way the
// API server reaches it, including garbage that never decodes.
func TestServeHTTP(t *testing.T) {
	wh := &Server{Policies: policy.NewStaticStore(&policy.Index{})}
	cases := map[string]struct {
		body     string
		wantCode int32
		wantMsg  string
	}{
		"not json":              {body: "{{{", wantCode: http.StatusBadRequest},
		"empty review":          {body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, wantCode: http.StatusBadRequest},
		"object is not json":    {body: review(t, `"just a string"`), wantCode: http.StatusBadRequest, wantMsg: "decoding ConfigMap"},
		"labels of wrong shape": {body: review(t, `{"metadata":{"labels":["a"]}}`), wantCode: http.StatusBadRequest, wantMsg: "metadata.labels: must be an object of strings"},
		"label of wrong type":   {body: review(t, `{"metadata":{"labels":{"a":1}}}`), wantCode: http.StatusBadRequest, wantMsg: "metadata.labels[a]: must be a string"},
		"wrong kind of review":  {body: `{"apiVersion":"v1","kind":"Pod"}`, wantCode: http.StatusBadRequest, wantMsg: "expected an admission.k8s.io/v1 AdmissionReview"},
		"no object":             {body: review(t, ""), wantCode: http.StatusBadRequest, wantMsg: "has no object"},
		"a member":              {body: review(t, `{"metadata":{"labels":{"wavegate.io/group":"db","wavegate.io/group-order":"1"}}}`), wantCode: http.StatusOK},
		"an update without its old object": {body: strings.Replace(review(t, `{"metadata":{"labels":{"wavegate.io/group":"db"}}}`), `"CREATE"`, `"UPDATE"`, 1),
			wantCode: http.StatusBadRequest, wantMsg: "request.oldObject for the UPDATE of ConfigMap"},
		"an update whose old object is not an object": {body: strings.Replace(review(t, `{"metadata":{}}`), `"CREATE"`, `"UPDATE","oldObject":"x"`, 1),
			wantCode: http.StatusBadRequest, wantMsg: "is missing or not an object"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			wh.ServeHTTP(rec, req)
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("response %q is not an AdmissionReview: %v", rec.Body.String(), err)
			}
			code := int32(http.StatusOK)
			if out.Response.Result != nil && out.Response.Result.Code != 0 {
				code = out.Response.Result.Code
			}
			if code != tc.wantCode {
				t.Errorf("code = %d, want %d (%+v)", code, tc.wantCode, out.Response.Result)
			}
			if tc.wantCode != http.StatusOK && out.Response.Allowed {
				t.Errorf("garbage was allowed")
			}
			if tc.wantMsg != "" && !strings.Contains(out.Response.Result.Message, tc.wantMsg) {
				t.Errorf("message %q, want it to contain %q", out.Response.Result.Message, tc.wantMsg)
			}
		})
	}
}

func TestUnloadedPoliciesAreRetryable(t *testing.T) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(review(t, `{}`)))
	req.Header.Set("Content-Type", "application/json")
	(&Server{Policies: &policy.Store{}}).ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Response.Allowed || out.Response.Result.Code != http.StatusServiceUnavailable || out.Response.UID != "1" {
		t.Errorf("got %+v, want a 503 denial for uid 1", out.Response)
	}
}

func review(t *testing.T, object string) string {
	t.Helper()
	obj := ""
	if object != "" {
		obj = `,"object":` + object
	}
	return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",` +
		`"kind":{"group":"","version":"v1","kind":"ConfigMap"},"resource":{"group":"","version":"v1","resource":"configmaps"},` +
		`"namespace":"shop","operation":"CREATE","userInfo":{}` + obj + `}}`
}

// rawObject and unstructuredLike let tests feed arbitrary JSON through admit.
type rawObject struct {
	runtime.Object
	raw []byte
}

func (r *rawObject) MarshalJSON() ([]byte, error) { return r.raw, nil }

type unstructuredLike struct {
	runtime.Object `json:"-"`
	APIVersion     string            `json:"apiVersion"`
	Kind           string            `json:"kind"`
	Metadata       metav1.ObjectMeta `json:"metadata"`
}

// grant is a PermissionSource whose review has run and found these verbs on every resource.
type grant []string

func (g grant) Ready() bool                  { return true }
func (g grant) CanPatch(string, string) bool { return slices.Contains(g, "patch") }
func (g grant) CanWatch(string, string) bool {
	return slices.Contains(g, "list") && slices.Contains(g, "watch")
}

// everything is what the shipped roles grant on the built-in kinds that are usually members.
var everything = grant{"get", "list", "watch", "patch"}

// unknown is a PermissionSource whose review has not run yet: it allows nothing.
type unknown struct{}

func (unknown) Ready() bool                  { return false }
func (unknown) CanPatch(string, string) bool { return false }
func (unknown) CanWatch(string, string) bool { return false }

func TestTeardownFinalizer(t *testing.T) {
	member := map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "1"}
	off := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: wavev1.WavePolicySpec{
		Defaults: wavev1.GroupDefaults{Teardown: wavev1.TeardownDisabled}, Groups: []wavev1.GroupSpec{{Name: "db", Order: 1}}}}})
	cases := map[string]struct {
		obj   runtime.Object
		gk    schema.GroupKind
		perms PermissionSource
		idx   *policy.Index
		// user creates the object (nil: an update by anyone).
		user *string
		want []string
		// wantClaimTemplate: the object is marked a claim a StatefulSet's template made.
		wantClaimTemplate bool
	}{
		"added when the manager may patch, list and watch the kind": {obj: &corev1.ConfigMap{ObjectMeta: meta(member, nil)}, gk: configMapGK, perms: everything,
			want: []string{keys.TeardownFinalizer}},
		"appended to existing finalizers": {obj: &corev1.ConfigMap{ObjectMeta: func() metav1.ObjectMeta {
			m := meta(member, nil)
			m.Finalizers = []string{"other"}
			return m
		}()}, gk: configMapGK, perms: everything, want: []string{"other", keys.TeardownFinalizer}},
		"never where the manager may not patch the kind": {obj: &corev1.ConfigMap{ObjectMeta: meta(member, nil)}, gk: configMapGK, perms: grant{"get", "list", "watch"}},
		// The hold removes the finalizer only from objects the member tracker sees: a kind the
		// manager may patch but not list and watch would keep it forever.
		"never where the manager may patch but not watch the kind": {obj: &corev1.ConfigMap{ObjectMeta: meta(member, nil)}, gk: configMapGK, perms: grant{"get", "list", "patch"}},
		"never where the manager may patch but not list the kind":  {obj: &corev1.ConfigMap{ObjectMeta: meta(member, nil)}, gk: configMapGK, perms: grant{"get", "watch", "patch"}},
		"never before permissions are known":                       {obj: &corev1.ConfigMap{ObjectMeta: meta(member, nil)}, gk: configMapGK, perms: unknown{}},
		"never without a permission source":                        {obj: &corev1.ConfigMap{ObjectMeta: meta(member, nil)}, gk: configMapGK},
		"never on pods":                                            {obj: &corev1.Pod{ObjectMeta: meta(member, nil)}, gk: podGK, perms: everything},
		"never when the policy turns teardown off":                 {obj: &corev1.ConfigMap{ObjectMeta: meta(map[string]string{keys.GroupLabel: "db"}, nil)}, gk: configMapGK, perms: everything, idx: off},
		// The StatefulSet keeps such a claim when it goes (Retain): a member, it would hold the
		// groups before its own for good.
		"never on a claim a StatefulSet's template made": {obj: &corev1.PersistentVolumeClaim{ObjectMeta: meta(member, nil)}, gk: claimGK, perms: everything,
			user: ptr.To(keys.StatefulSetControllerUser), wantClaimTemplate: true},
		"nor by kube-controller-manager without per-controller credentials": {obj: &corev1.PersistentVolumeClaim{ObjectMeta: meta(member, nil)}, gk: claimGK, perms: everything,
			user: ptr.To(keys.KubeControllerManagerUser), wantClaimTemplate: true},
		"added to a claim someone else creates": {obj: &corev1.PersistentVolumeClaim{ObjectMeta: meta(member, nil)}, gk: claimGK, perms: everything,
			user: ptr.To("alice"), want: []string{keys.TeardownFinalizer}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			raw, _ := json.Marshal(tc.obj)
			req := Request{GroupKind: tc.gk, Namespace: "shop", Permissions: tc.perms, Gates: nil}
			if tc.user != nil {
				req.Create, req.User = true, *tc.user
				req.Resource = schema.GroupResource{Resource: strings.ToLower(tc.gk.Kind) + "s"}
			}
			resp := Mutate(parse(t, raw, tc.gk), req, tc.idx)
			out := applied(t, raw, resp)
			o := parse(t, out, tc.gk)
			if diff := cmp.Diff(tc.want, o.Finalizers); diff != "" {
				t.Errorf("finalizers (-want,+got):\n%s", diff)
			}
			if _, got := o.Annotations[keys.ClaimTemplateAnnotation]; got != tc.wantClaimTemplate {
				t.Errorf("marked a claim of a StatefulSet's template: %v, want %v", got, tc.wantClaimTemplate)
			}
			// Idempotent: a second pass (an update by anyone) adds nothing more.
			req.Create, req.User = false, "alice"
			again := Mutate(o, req, tc.idx)
			for _, op := range again.Patches {
				if strings.HasPrefix(op.Path, "/metadata/finalizers") {
					t.Errorf("second pass patched finalizers again: %+v", op)
				}
			}
		})
	}
}

func TestPodsAreGatedAndDerivedObjectsLeftAlone(t *testing.T) {
	member := map[string]string{keys.GroupLabel: "web", keys.GroupOrderLabel: "3"}
	pod := &corev1.Pod{ObjectMeta: meta(member, nil), Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	raw, _ := json.Marshal(pod)
	resp := Mutate(parse(t, raw, podGK), Request{GroupKind: podGK, Resource: schema.GroupResource{Resource: "pods"}, Namespace: "shop", Create: true}, nil)
	gated, admitted := false, false
	for _, op := range resp.Patches {
		gated = gated || op.Path == "/spec/schedulingGates"
		admitted = admitted || op.Path == "/metadata/labels/wavegate.io~1admitted" && op.Value == "true"
	}
	if !gated || !admitted {
		t.Errorf("a new member pod was not gated and labeled %s=true: %+v", keys.AdmittedLabel, resp.Patches)
	}
	// A pod grouped only by a policy's label is gated and labeled with its group: the controller
	// finds the pods to release by wavegate's label.
	idx := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: wavev1.WavePolicySpec{GroupLabel: "app.kubernetes.io/component", Groups: []wavev1.GroupSpec{{Name: "database", Order: 1}}}}})
	bare := &corev1.Pod{ObjectMeta: meta(map[string]string{"app.kubernetes.io/component": "database"}, nil),
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	raw, _ = json.Marshal(bare)
	req := Request{GroupKind: podGK, Resource: schema.GroupResource{Resource: "pods"}, Namespace: "shop", Create: true}
	resp = Mutate(parse(t, raw, podGK), req, idx)
	if len(resp.Patches) == 0 {
		t.Fatal("the bare pod was not patched")
	}
	out := applied(t, raw, resp)
	got := &corev1.Pod{}
	if err := json.Unmarshal(out, got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[keys.GroupLabel] != "database" || got.Labels[keys.AdmittedLabel] != "true" || len(got.Spec.SchedulingGates) != 1 {
		t.Errorf("a pod grouped by the policy's label: labels %v, gates %v; want %s=database, %s=true and the gate",
			got.Labels, got.Spec.SchedulingGates, keys.GroupLabel, keys.AdmittedLabel)
	}
	if again := Mutate(parse(t, out, podGK), req, idx); len(again.Patches) != 0 {
		t.Errorf("a second pass patched the pod again: %+v", again.Patches)
	}
	// A pod created bound to a node cannot carry a scheduling gate (the API server refuses it): it
	// is not gated, and the warning says why and what to do.
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "n1"
	raw, _ = json.Marshal(bound)
	resp = Mutate(parse(t, raw, podGK), Request{GroupKind: podGK, Resource: schema.GroupResource{Resource: "pods"}, Namespace: "shop", Create: true}, nil)
	for _, op := range resp.Patches {
		if strings.HasPrefix(op.Path, "/spec/schedulingGates") {
			t.Errorf("a pod bound to a node was gated: %+v", resp.Patches)
		}
	}
	if !slices.ContainsFunc(resp.Warnings, func(w string) bool { return strings.HasPrefix(w, `spec.nodeName: the pod is bound to node "n1"`) }) {
		t.Errorf("warnings %q, want one naming spec.nodeName", resp.Warnings)
	}
	slice := &corev1.ConfigMap{ObjectMeta: meta(member, nil)}
	raw, _ = json.Marshal(slice)
	es := schema.GroupKind{Group: "discovery.k8s.io", Kind: "EndpointSlice"}
	resp = Mutate(parse(t, raw, es), Request{GroupKind: es, Resource: schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"},
		Namespace: "shop", Create: true, Permissions: everything}, nil)
	if len(resp.Patches) != 0 {
		t.Errorf("an EndpointSlice that copied a Service's labels was mutated: %+v", resp.Patches)
	}
}

// TestUpdatesRatchet: an update that leaves labels which no longer resolve as they were is
// admitted with a warning (so that a finalizer can still be removed); changing labels into
// invalid ones is denied.
func TestUpdatesRatchet(t *testing.T) {
	bad := map[string]string{keys.GroupLabel: "db"} // no order anywhere
	raw, _ := json.Marshal(&corev1.ConfigMap{ObjectMeta: meta(bad, nil)})
	resp := Mutate(parse(t, raw, configMapGK), Request{GroupKind: configMapGK, Namespace: "shop", OldLabels: bad}, nil)
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], `group "db" has no order`) {
		t.Errorf("unchanged invalid labels: got %+v", resp)
	}
	resp = Mutate(parse(t, raw, configMapGK), Request{GroupKind: configMapGK, Namespace: "shop", OldLabels: map[string]string{}}, nil)
	if resp.Allowed {
		t.Error("an update that introduces invalid labels was admitted")
	}
}

// TestLeavingTheGroupReleasesTheFinalizer: an UPDATE that leaves a member with no group label
// removes wavegate's finalizer (the member tracker selects objects by those labels and would never
// see it again), also while the object is being deleted; labels that still name a group keep it.
func TestLeavingTheGroupReleasesTheFinalizer(t *testing.T) {
	const component = "app.kubernetes.io/component"
	member := map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "1", "app": "db"}
	idx := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: wavev1.WavePolicySpec{GroupLabel: component, Groups: []wavev1.GroupSpec{{Name: "database", Order: 1}}}}})
	released := "metadata.finalizers: removed wavegate.io/ordered-teardown; the object carries no group label any more, " +
		"so wavegate no longer orders its deletion"
	object := func(labels map[string]string, deleting bool, finalizers ...string) metav1.ObjectMeta {
		m := meta(labels, nil)
		m.Finalizers = finalizers
		if deleting {
			now := metav1.Now()
			m.DeletionTimestamp = &now
		}
		return m
	}
	cases := map[string]struct {
		obj metav1.ObjectMeta
		gk  schema.GroupKind
		// old are the labels before the update; nil: a CREATE.
		old          map[string]string
		idx          *policy.Index
		want         []string
		wantWarnings []string
	}{
		"group label removed": {
			obj: object(map[string]string{"app": "db"}, false, "other", keys.TeardownFinalizer), old: member,
			want: []string{"other"}, wantWarnings: []string{released},
		},
		"group label removed while being deleted": {
			obj: object(map[string]string{"app": "db"}, true, keys.TeardownFinalizer, "other"), old: member,
			want: []string{"other"}, wantWarnings: []string{released},
		},
		"every label removed, the finalizer listed twice": {
			obj: object(nil, false, keys.TeardownFinalizer, "other", keys.TeardownFinalizer), old: member,
			want: []string{"other"}, wantWarnings: []string{released},
		},
		"old labels that no longer resolved": {
			obj: object(nil, false, keys.TeardownFinalizer), old: map[string]string{keys.GroupLabel: "db"},
			want: []string{}, wantWarnings: []string{released},
		},
		"the policy's group label removed": {
			obj: object(nil, false, keys.TeardownFinalizer), old: map[string]string{component: "database"}, idx: idx,
			want: []string{}, wantWarnings: []string{released},
		},
		"the update drops the finalizer itself": {
			obj: object(nil, false, "other"), old: member,
			want: []string{"other"},
		},
		"wavegate's label removed, the policy's label still names a group": {
			obj: object(map[string]string{component: "database"}, false, keys.TeardownFinalizer),
			old: map[string]string{keys.GroupLabel: "database", component: "database"}, idx: idx,
			want: []string{keys.TeardownFinalizer},
		},
		"moved to another group": {
			obj: object(map[string]string{keys.GroupLabel: "web", keys.GroupOrderLabel: "2"}, false, keys.TeardownFinalizer), old: member,
			want: []string{keys.TeardownFinalizer},
		},
		"moved to another group while being deleted": {
			obj: object(map[string]string{keys.GroupLabel: "web", keys.GroupOrderLabel: "2"}, true, keys.TeardownFinalizer), old: member,
			want: []string{keys.TeardownFinalizer},
		},
		"unchanged labels": {
			obj: object(member, true, keys.TeardownFinalizer), old: member,
			want: []string{keys.TeardownFinalizer},
		},
		"not a member before either (a label this index does not know)": {
			obj: object(nil, false, keys.TeardownFinalizer), old: map[string]string{component: "database"},
			want: []string{keys.TeardownFinalizer},
		},
		"a create": {
			obj:  object(nil, false, keys.TeardownFinalizer),
			want: []string{keys.TeardownFinalizer},
		},
		"never on pods": {
			obj: object(nil, false, keys.TeardownFinalizer), gk: podGK, old: member,
			want: []string{keys.TeardownFinalizer},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			gk := tc.gk
			if gk.Empty() {
				gk = configMapGK
			}
			raw, err := json.Marshal(&unstructuredLike{APIVersion: "v1", Kind: gk.Kind, Metadata: tc.obj})
			if err != nil {
				t.Fatal(err)
			}
			req := Request{GroupKind: gk, Resource: schema.GroupResource{Resource: strings.ToLower(gk.Kind) + "s"}, Namespace: "shop",
				Permissions: everything, Create: tc.old == nil, OldLabels: tc.old}
			resp := Mutate(parse(t, raw, gk), req, tc.idx)
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			out := applied(t, raw, resp)
			o := parse(t, out, gk)
			want := tc.want
			if len(want) == 0 {
				want = nil // an emptied list is still present, but holds nothing
			}
			if diff := cmp.Diff(want, o.Finalizers); diff != "" {
				t.Errorf("finalizers (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWarnings, resp.Warnings); diff != "" {
				t.Errorf("warnings (-want,+got):\n%s", diff)
			}
			// Idempotent: a second pass over the result touches the finalizers no more.
			for _, op := range Mutate(o, req, tc.idx).Patches {
				if strings.HasPrefix(op.Path, "/metadata/finalizers") {
					t.Errorf("second pass patched the finalizers again: %+v", op)
				}
			}
		})
	}
}

// TestUntrackedKindsAreNamed: a member of a kind the manager may not list and watch is admitted
// (denying would break existing apps and syncs) but is never tracked, so no group waits for it:
// admission says so, naming the label, the kind, the consequence and the fix, on creation and on
// updates that change labels. Not for pods (gated whatever the tracker tracks), not for objects a
// controller made (their controller is the member), and not while the permissions are unknown.
func TestUntrackedKindsAreNamed(t *testing.T) {
	const component = "app.kubernetes.io/component"
	hpa := schema.GroupResource{Group: "autoscaling", Resource: "horizontalpodautoscalers"}
	hpaGK := schema.GroupKind{Group: "autoscaling", Kind: "HorizontalPodAutoscaler"}
	widgets := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	widgetGK := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	configMaps := schema.GroupResource{Resource: "configmaps"}
	pods := schema.GroupResource{Resource: "pods"}
	db := map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "1"}
	web := map[string]string{keys.GroupLabel: "web", keys.GroupOrderLabel: "2"}
	byPolicy := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: wavev1.WavePolicySpec{GroupLabel: component, Groups: []wavev1.GroupSpec{{Name: "database", Order: 1}}}}})
	off := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: wavev1.WavePolicySpec{
		Defaults: wavev1.GroupDefaults{Teardown: wavev1.TeardownDisabled}, Groups: []wavev1.GroupSpec{{Name: "db", Order: 1}}}}})
	warning := func(label string, gr schema.GroupResource, verbs string) []string {
		return []string{"metadata.labels[" + label + "]: wavegate may not list and watch " + gr.String() + ", so this object is not ordered " +
			"(later groups do not wait for it, and its deletion does not wait for them): grant " + verbs +
			" with a ClusterRole labeled wavegate.io/aggregate-to-manager=true"}
	}
	owned := meta(db, nil)
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "x", UID: "u", Controller: ptr.To(true)}}
	deleting := meta(db, nil)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	cases := map[string]struct {
		obj      metav1.ObjectMeta
		gk       schema.GroupKind
		resource schema.GroupResource
		perms    PermissionSource
		idx      *policy.Index
		// old are the labels before the update; nil: a CREATE.
		old            map[string]string
		wantWarnings   []string
		wantFinalizers []string
	}{
		"a new HPA the manager may not read": {
			obj: meta(db, nil), gk: hpaGK, resource: hpa, perms: grant{},
			wantWarnings: []string{"metadata.labels[wavegate.io/group]: wavegate may not list and watch horizontalpodautoscalers.autoscaling, " +
				"so this object is not ordered (later groups do not wait for it, and its deletion does not wait for them): " +
				"grant list, watch and patch with a ClusterRole labeled wavegate.io/aggregate-to-manager=true"},
		},
		"a custom resource the manager may patch but not list and watch": {
			obj: meta(db, nil), gk: widgetGK, resource: widgets, perms: grant{"get", "patch"},
			wantWarnings: warning(keys.GroupLabel, widgets, "list and watch"),
		},
		"teardown turned off: patch is not needed": {
			obj: meta(map[string]string{keys.GroupLabel: "db"}, nil), gk: hpaGK, resource: hpa, perms: grant{}, idx: off,
			wantWarnings: warning(keys.GroupLabel, hpa, "list and watch"),
		},
		"a core kind, watch but no list": {
			obj: meta(db, nil), gk: configMapGK, resource: configMaps, perms: grant{"get", "watch", "patch"},
			wantWarnings: warning(keys.GroupLabel, configMaps, "list and watch"),
		},
		"grouped by a policy's label": {
			obj: meta(map[string]string{component: "database"}, nil), gk: hpaGK, resource: hpa, perms: grant{}, idx: byPolicy,
			wantWarnings: warning(component, hpa, "list, watch and patch"),
		},
		"an update that adds the group label": {
			obj: meta(db, nil), gk: hpaGK, resource: hpa, perms: grant{}, old: map[string]string{},
			wantWarnings: warning(keys.GroupLabel, hpa, "list, watch and patch"),
		},
		"an update that moves it to another group": {
			obj: meta(web, nil), gk: hpaGK, resource: hpa, perms: grant{}, old: db,
			wantWarnings: warning(keys.GroupLabel, hpa, "list, watch and patch"),
		},
		"an update that leaves the labels as they were": {
			obj: meta(db, nil), gk: hpaGK, resource: hpa, perms: grant{}, old: db,
		},
		"a tracked kind": {
			obj: meta(db, nil), gk: hpaGK, resource: hpa, perms: everything,
			wantFinalizers: []string{keys.TeardownFinalizer},
		},
		"a kind tracked but not patched": {
			obj: meta(db, nil), gk: hpaGK, resource: hpa, perms: grant{"get", "list", "watch"},
		},
		"permissions not known yet": {
			obj: meta(db, nil), gk: hpaGK, resource: hpa, perms: unknown{},
		},
		"no permission source": {
			obj: meta(db, nil), gk: hpaGK, resource: hpa,
		},
		"pods are gated, not tracked": {
			obj: meta(db, nil), gk: podGK, resource: pods, perms: grant{},
		},
		"made by a controller": {
			obj: owned, gk: hpaGK, resource: hpa, perms: grant{},
		},
		"being deleted": {
			obj: deleting, gk: hpaGK, resource: hpa, perms: grant{}, old: map[string]string{},
		},
		"not a member": {
			obj: meta(map[string]string{"app": "db"}, nil), gk: hpaGK, resource: hpa, perms: grant{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			raw, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": tc.gk.Kind, "metadata": tc.obj, "spec": map[string]any{}})
			if err != nil {
				t.Fatal(err)
			}
			req := Request{GroupKind: tc.gk, Resource: tc.resource, Namespace: "shop", Permissions: tc.perms,
				Create: tc.old == nil, OldLabels: tc.old}
			resp := Mutate(parse(t, raw, tc.gk), req, tc.idx)
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			if diff := cmp.Diff(tc.wantWarnings, resp.Warnings); diff != "" {
				t.Errorf("warnings (-want,+got):\n%s", diff)
			}
			out := applied(t, raw, resp)
			if diff := cmp.Diff(tc.wantFinalizers, parse(t, out, tc.gk).Finalizers); diff != "" {
				t.Errorf("finalizers (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestPanicIsAnsweredForItsRequest: a review that panics is answered with an error for the same
// request (its uid echoed): a response without it is invalid to the API server, which would then
// report that instead of wavegate's error.
func TestPanicIsAnsweredForItsRequest(t *testing.T) {
	var rr reviewReader
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(review(t, `{}`)))
	req.Header.Set("Content-Type", "application/json")
	rr.serve(rec, req, func(*fastjson.Value) admission.Response { panic("a bug") })
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("response %q is not an AdmissionReview: %v", rec.Body.String(), err)
	}
	if out.Response.UID != "1" || out.Response.Allowed || out.Response.Result == nil || out.Response.Result.Code != http.StatusInternalServerError {
		t.Errorf("response %+v, want uid 1, not allowed, code 500", out.Response)
	}
}

// recordedGates records the templates admission asks about.
type recordedGates struct{ asked []string }

func (g *recordedGates) Cleared(_, _, template string) bool {
	g.asked = append(g.asked, template)
	return false
}

// TestGateAsksForTheTemplateItsControllerStamps: admission reads a pod's template as the
// controller does (sequence.TemplateToken): a StatefulSet's pod by its controller-revision-hash,
// even when its template also carries a pod-template-hash, whose value never changes.
func TestGateAsksForTheTemplateItsControllerStamps(t *testing.T) {
	for kind, want := range map[string]string{"StatefulSet": "owner/rev-2", "ReplicaSet": "owner/static", "Widget": "owner/static"} {
		pod := &corev1.Pod{ObjectMeta: meta(map[string]string{keys.GroupLabel: "web", keys.GroupOrderLabel: "3",
			keys.PodTemplateHashLabel: "static", keys.ControllerRevisionHashLabel: "rev-2"}, nil)}
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "x", UID: "owner", Controller: ptr.To(true)}}
		raw, _ := json.Marshal(pod)
		gates := &recordedGates{}
		Mutate(parse(t, raw, podGK), Request{GroupKind: podGK, Resource: schema.GroupResource{Resource: "pods"}, Namespace: "shop", Create: true, Gates: gates}, nil)
		if d := cmp.Diff([]string{want}, gates.asked); d != "" {
			t.Errorf("%s's pod: templates asked (-want +got):\n%s", kind, d)
		}
	}
}

// TestJobDeadlineWarning: the Job controller counts a Job's activeDeadlineSeconds from its start,
// gated pods or not, so a member Job (or a CronJob's Jobs) with one is admitted with a warning that
// names the field, the group and the fix; one without gets none.
func TestJobDeadlineWarning(t *testing.T) {
	labels := map[string]string{keys.GroupLabel: "migrate", keys.GroupOrderLabel: "2"}
	spec := batchv1.JobSpec{ActiveDeadlineSeconds: ptr.To(int64(300)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "m", Image: "m"}}}}}
	noDeadline := *spec.DeepCopy()
	noDeadline.ActiveDeadlineSeconds = nil
	jobGK, cronGK := schema.GroupKind{Group: "batch", Kind: "Job"}, schema.GroupKind{Group: "batch", Kind: "CronJob"}
	for _, tc := range []struct {
		name string
		gk   schema.GroupKind
		obj  any
		want string
	}{
		{"Job", jobGK, &batchv1.Job{ObjectMeta: meta(labels, nil), Spec: spec}, `spec.activeDeadlineSeconds: the Job's deadline (300 s) counts from its start`},
		{"CronJob", cronGK, &batchv1.CronJob{ObjectMeta: meta(labels, nil), Spec: batchv1.CronJobSpec{Schedule: "@daily", JobTemplate: batchv1.JobTemplateSpec{Spec: spec}}},
			`spec.jobTemplate.spec.activeDeadlineSeconds: the Job's deadline (300 s) counts from its start`},
		{"Job without a deadline", jobGK, &batchv1.Job{ObjectMeta: meta(labels, nil), Spec: noDeadline}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			resp := Mutate(parse(t, raw, tc.gk), Request{GroupKind: tc.gk, Resource: schema.GroupResource{Group: "batch", Resource: "jobs"}, Namespace: "shop", Create: true}, nil)
			warned := slices.ContainsFunc(resp.Warnings, func(w string) bool { return strings.Contains(w, "activeDeadlineSeconds") })
			if tc.want == "" && warned || tc.want != "" && !slices.ContainsFunc(resp.Warnings, func(w string) bool {
				return strings.HasPrefix(w, tc.want) && strings.Contains(w, `groups before "migrate"`)
			}) {
				t.Errorf("warnings %q, want one starting %q", resp.Warnings, tc.want)
			}
		})
	}
}
