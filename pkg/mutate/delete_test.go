package mutate

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metadatafake "k8s.io/client-go/metadata/fake"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/teardown"
)

// laterGroups: in each sequence, group instances (order 2, of the given resources: Widgets by
// default) has the given number of objects.
type laterGroups struct {
	objects   map[string]int32
	resources []string
}

func (l laterGroups) Later(seq string, order int32) ([]string, int32, []string, bool) {
	if order >= 2 || l.objects[seq] == 0 {
		return nil, 0, nil, true
	}
	resources := l.resources
	if resources == nil {
		resources = []string{"example.com/v1/widgets"}
	}
	return []string{"instances"}, l.objects[seq], resources, true
}

// Spanning: a sequence named after the namespace spans groups 1 and 2 while later objects remain.
func (l laterGroups) Spanning(ns string) []teardown.Span {
	if l.objects[ns] == 0 {
		return nil
	}
	return []teardown.Span{{Sequence: ns, Earliest: 1}}
}

type terminating map[string]bool

func (t terminating) Terminating(ns string) bool { return t[ns] }

// Labels: every namespace has opted in.
func (t terminating) Labels(string) (map[string]string, error) {
	return map[string]string{keys.EnabledLabel: "true"}, nil
}

func TestDeleteCheck(t *testing.T) {
	const (
		operatorPod = `{"metadata":{"labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1","app":"op"},` +
			`"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"op-1","uid":"u1","controller":true}]}}`
		terminatingPod = `{"metadata":{"deletionTimestamp":"2026-01-01T00:00:00Z","labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1"},` +
			`"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"op-1","uid":"u1","controller":true}]}}`
		statefulPod = `{"metadata":{"labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1"},` +
			`"ownerReferences":[{"apiVersion":"apps/v1","kind":"StatefulSet","name":"op","uid":"u1","controller":true}]}}`
		daemonPod = `{"metadata":{"labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1"},` +
			`"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"op","uid":"u1","controller":true}]}}`
		jobPod = `{"metadata":{"labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1"},` +
			`"ownerReferences":[{"apiVersion":"batch/v1","kind":"Job","name":"op","uid":"u1","controller":true}]}}`
		barePod              = `{"metadata":{"labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1"}}}`
		operatorRS           = `{"metadata":{"labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"op","uid":"u0","controller":true}]}}`
		lastGroupPod         = `{"metadata":{"labels":{"wavegate.io/group":"web","wavegate.io/group-order":"2"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"w","uid":"u2","controller":true}]}}`
		operatorDeploy       = `{"metadata":{"labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1"}}}`
		lastGroupDeploy      = `{"metadata":{"labels":{"wavegate.io/group":"web","wavegate.io/group-order":"2"}}}`
		ungrouped            = `{"metadata":{"labels":{"app":"op"}}}`
		terminatingUngrouped = `{"metadata":{"deletionTimestamp":"2026-01-01T00:00:00Z"}}`
		namespaceCtrl        = "system:serviceaccount:kube-system:namespace-controller"
		kubelet              = "system:node:node-0"
		replicasetCtrl       = "system:serviceaccount:kube-system:replicaset-controller"
	)
	pods := [2]string{"", "pods"}
	rss := [2]string{"apps", "replicasets"}
	deployments := [2]string{"apps", "deployments"}
	serviceAccounts := [2]string{"", "serviceaccounts"}
	leases := [2]string{"coordination.k8s.io", "leases"}
	cases := map[string]struct {
		resource    [2]string
		object      string
		user        string
		propagation string
		nsDeleting  bool
		later       int32
		wantDenied  bool
		// laterResources are the later group's kinds (Widgets when nil).
		laterResources []string
	}{
		"namespace deletion: the held operator's pod keeps running":        {pods, operatorPod, namespaceCtrl, "Background", true, 2, true, nil},
		"namespace deletion: its ReplicaSet too":                           {rss, operatorRS, namespaceCtrl, "Background", true, 2, true, nil},
		"namespace deletion: a StatefulSet's pod":                          {pods, statefulPod, namespaceCtrl, "Background", true, 2, true, nil},
		"namespace deletion: a DaemonSet's pod":                            {pods, daemonPod, namespaceCtrl, "Background", true, 2, true, nil},
		"namespace deletion by another client is the same":                 {pods, operatorPod, "alice", "", true, 2, true, nil},
		"namespace deletion: later groups gone":                            {pods, operatorPod, namespaceCtrl, "Background", true, 0, false, nil},
		"namespace deletion: the last group is not held":                   {pods, lastGroupPod, namespaceCtrl, "Background", true, 2, false, nil},
		"another client, namespace deleting: a Job's pod is not held":      {pods, jobPod, "alice", "Background", true, 2, false, nil},
		"another client, namespace deleting: a bare pod is not held":       {pods, barePod, "alice", "Background", true, 2, false, nil},
		"another client, namespace deleting: the workload (its finalizer)": {deployments, operatorDeploy, "alice", "Background", true, 2, false, nil},
		// The namespace controller's sweep keeps everything an earlier group may need.
		"namespace controller: a held group's Job pod":               {pods, jobPod, namespaceCtrl, "Background", true, 2, true, nil},
		"namespace controller: a held group's bare pod":              {pods, barePod, namespaceCtrl, "Background", true, 2, true, nil},
		"namespace controller: the held workload itself":             {deployments, operatorDeploy, namespaceCtrl, "Background", true, 2, true, nil},
		"namespace controller: a ServiceAccount without a group":     {serviceAccounts, ungrouped, namespaceCtrl, "Background", true, 2, true, nil},
		"namespace controller: a Lease without a group":              {leases, ungrouped, namespaceCtrl, "Background", true, 2, true, nil},
		"namespace controller: without a group, later groups gone":   {serviceAccounts, ungrouped, namespaceCtrl, "Background", true, 0, false, nil},
		"namespace controller: a terminating object without a group": {serviceAccounts, terminatingUngrouped, namespaceCtrl, "Background", true, 2, false, nil},
		"another client deletes a ServiceAccount without a group":    {serviceAccounts, ungrouped, "alice", "Background", true, 2, false, nil},
		"namespace controller: the last group's member":              {deployments, lastGroupDeploy, namespaceCtrl, "Background", true, 2, false, nil},
		// One collection per kind, deleted in list order up to the first refusal: holding an object
		// of a kind the later groups have too would hold them, and the namespace, for good.
		"namespace controller: a held workload whose kind a later group has too": {deployments, operatorDeploy, namespaceCtrl, "Background", true, 2, false,
			[]string{"apps/v1/deployments"}},
		"namespace controller: without a group, of a kind a later group has too": {serviceAccounts, ungrouped, namespaceCtrl, "Background", true, 2, false,
			[]string{"example.com/v1/widgets", "v1/serviceaccounts"}},
		"namespace controller: the held operator's pod, whatever the later kinds": {pods, operatorPod, namespaceCtrl, "Background", true, 2, true,
			[]string{"v1/pods"}},
		"the kubelet is never refused":                              {pods, operatorPod, kubelet, "", true, 2, false, nil},
		"a terminating pod is never refused":                        {pods, terminatingPod, namespaceCtrl, "Background", true, 2, false, nil},
		"a rollout outside namespace deletion":                      {pods, operatorPod, replicasetCtrl, "Background", false, 2, false, nil},
		"a ReplicaSet outside namespace deletion":                   {rss, operatorRS, "alice", "Background", false, 2, false, nil},
		"foreground deletion of a member while later groups remain": {deployments, operatorDeploy, "alice", "Foreground", false, 2, true, nil},
		"foreground deletion once later groups are gone":            {deployments, operatorDeploy, "alice", "Foreground", false, 0, false, nil},
		"background deletion of a member":                           {deployments, operatorDeploy, "alice", "Background", false, 2, false, nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := &DeleteServer{Policies: policy.NewStaticStore(&policy.Index{}), Check: &teardown.Check{Later: laterGroups{map[string]int32{"shop": tc.later}, tc.laterResources},
				Namespaces: terminating{"shop": tc.nsDeleting}}}
			out := serveDelete(t, s, tc.resource, tc.object, tc.user, tc.propagation)
			if out.Allowed == tc.wantDenied {
				t.Fatalf("allowed = %v, want %v (%+v)", out.Allowed, !tc.wantDenied, out.Result)
			}
			if tc.wantDenied && out.Result.Code != http.StatusConflict {
				t.Errorf("code = %d, want 409 Conflict (retryable)", out.Result.Code)
			}
			if tc.wantDenied && tc.propagation != "Foreground" && !strings.Contains(out.Result.Message, `until group(s) instances of sequence "shop" are gone (2 objects remain)`) &&
				!strings.Contains(out.Result.Message, `with the earliest groups of sequence "shop", until group(s) instances are gone (2 objects remain)`) {
				t.Errorf("message %q does not say what it waits for", out.Result.Message)
			}
		})
	}
}

func serveDelete(t *testing.T, s *DeleteServer, resource [2]string, object, user, propagation string) *admissionv1.AdmissionResponse {
	t.Helper()
	kind := map[string]string{"pods": "Pod", "replicasets": "ReplicaSet", "deployments": "Deployment", "serviceaccounts": "ServiceAccount", "leases": "Lease"}[resource[1]]
	opts := `{}`
	if propagation != "" {
		opts = `{"propagationPolicy":"` + propagation + `"}`
	}
	body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",` +
		`"kind":{"group":"` + resource[0] + `","version":"v1","kind":"` + kind + `"},"resource":{"group":"` + resource[0] + `","version":"v1","resource":"` + resource[1] + `"},` +
		`"namespace":"shop","operation":"DELETE","userInfo":{"username":"` + user + `"},"options":` + opts + `,"oldObject":` + object + `}}`
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, DeletePath, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	s.ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("response %q is not an AdmissionReview: %v", rec.Body.String(), err)
	}
	return out.Response
}

// TestDeleteCheckNeverHoldsAPodOnALaterGroupsClaim: while its namespace is deleted, a pod that
// mounts a claim of a later group goes, grouped or not. The claim's pvc-protection finalizer waits
// for the pod, so holding the pod until the later groups are gone would hold the claim, its group,
// and the pod for good. A pod on a claim of its own group, of no group or of another sequence, or
// on a claim that does not exist, is held as any other.
func TestDeleteCheckNeverHoldsAPodOnALaterGroupsClaim(t *testing.T) {
	const namespaceCtrl = "system:serviceaccount:kube-system:namespace-controller"
	meta := func(apiVersion, kind, name string, labels map[string]string) runtime.Object {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: labels}}
	}
	instances := map[string]string{keys.GroupLabel: "instances", keys.GroupOrderLabel: "2"}
	s := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(s); err != nil {
		t.Fatal(err)
	}
	md := metadatafake.NewSimpleMetadataClient(s,
		meta("example.com/v1", "Widget", "w0", instances), meta("example.com/v1", "Widget", "w1", instances),
		meta("v1", "PersistentVolumeClaim", "data", instances),
		meta("v1", "PersistentVolumeClaim", "backup-0-scratch", instances), // an ephemeral volume's claim, labeled by its template
		meta("v1", "PersistentVolumeClaim", "operator-data", map[string]string{keys.GroupLabel: "operator", keys.GroupOrderLabel: "1"}),
		meta("v1", "PersistentVolumeClaim", "scratch", map[string]string{"app": "backup"}),
		meta("v1", "PersistentVolumeClaim", "elsewhere", map[string]string{keys.GroupLabel: "instances", keys.GroupOrderLabel: "2", keys.SequenceLabel: "shop.other"}))
	pod := func(labels, claim string) string {
		return `{"metadata":{"labels":` + labels + `,"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"u1","controller":true}]},` +
			`"spec":{"volumes":[{"name":"tmp","emptyDir":{}},{"name":"data","persistentVolumeClaim":{"claimName":"` + claim + `"}}]}}`
	}
	const (
		ungrouped = `{"app":"backup"}`
		operator  = `{"wavegate.io/group":"operator","wavegate.io/group-order":"1"}`
	)
	cases := map[string]struct {
		object     string
		wantDenied bool
	}{
		"a pod of no group on a later group's claim":       {pod(ungrouped, "data"), false},
		"an earlier group's pod on a later group's claim":  {pod(operator, "data"), false},
		"a pod of no group on a claim of no group":         {pod(ungrouped, "scratch"), true},
		"a pod of no group on the earliest group's claim":  {pod(ungrouped, "operator-data"), true},
		"an earlier group's pod on its own group's claim":  {pod(operator, "operator-data"), true},
		"a pod of no group on another sequence's claim":    {pod(ungrouped, "elsewhere"), true},
		"a pod of no group on a claim that does not exist": {pod(ungrouped, "gone"), true},
		"a pod of no group on a later group's ephemeral claim": {`{"metadata":{"name":"backup-0","labels":` + ungrouped + `},` +
			`"spec":{"volumes":[{"name":"scratch","ephemeral":{"volumeClaimTemplate":{"spec":{}}}}]}}`, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv := &DeleteServer{Policies: policy.NewStaticStore(&policy.Index{}), Check: &teardown.Check{
				Later:      laterGroups{objects: map[string]int32{"shop": 2}},
				Namespaces: terminating{"shop": true}, Metadata: md}}
			out := serveDelete(t, srv, [2]string{"", "pods"}, tc.object, namespaceCtrl, "Background")
			if out.Allowed == tc.wantDenied {
				t.Fatalf("allowed = %v, want %v (%+v)", out.Allowed, !tc.wantDenied, out.Result)
			}
		})
	}
}
