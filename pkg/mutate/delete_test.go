package mutate

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/teardown"
)

type laterGroups map[string]int32 // sequence -> objects of groups after order 1

func (l laterGroups) Later(seq string, order int32) ([]string, int32, []string, bool) {
	if order >= 2 || l[seq] == 0 {
		return nil, 0, nil, true
	}
	return []string{"instances"}, l[seq], []string{"example.com/v1/widgets"}, true
}

type terminating map[string]bool

func (t terminating) Terminating(ns string) bool { return t[ns] }

func (t terminating) Labels(string) (map[string]string, error) { return nil, nil }

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
		barePod        = `{"metadata":{"labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1"}}}`
		operatorRS     = `{"metadata":{"labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"op","uid":"u0","controller":true}]}}`
		lastGroupPod   = `{"metadata":{"labels":{"wavegate.io/group":"web","wavegate.io/group-order":"2"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"w","uid":"u2","controller":true}]}}`
		operatorDeploy = `{"metadata":{"labels":{"wavegate.io/group":"operator","wavegate.io/group-order":"1"}}}`
		namespaceCtrl  = "system:serviceaccount:kube-system:namespace-controller"
		kubelet        = "system:node:node-0"
		replicasetCtrl = "system:serviceaccount:kube-system:replicaset-controller"
	)
	pods := [2]string{"", "pods"}
	rss := [2]string{"apps", "replicasets"}
	deployments := [2]string{"apps", "deployments"}
	cases := map[string]struct {
		resource    [2]string
		object      string
		user        string
		propagation string
		nsDeleting  bool
		later       int32
		wantDenied  bool
	}{
		"namespace deletion: the held operator's pod keeps running":        {pods, operatorPod, namespaceCtrl, "Background", true, 2, true},
		"namespace deletion: its ReplicaSet too":                           {rss, operatorRS, namespaceCtrl, "Background", true, 2, true},
		"namespace deletion: a StatefulSet's pod":                          {pods, statefulPod, namespaceCtrl, "Background", true, 2, true},
		"namespace deletion: a DaemonSet's pod":                            {pods, daemonPod, namespaceCtrl, "Background", true, 2, true},
		"namespace deletion by another client is the same":                 {pods, operatorPod, "alice", "", true, 2, true},
		"namespace deletion: later groups gone":                            {pods, operatorPod, namespaceCtrl, "Background", true, 0, false},
		"namespace deletion: the last group is not held":                   {pods, lastGroupPod, namespaceCtrl, "Background", true, 2, false},
		"namespace deletion: a Job's pod is not held":                      {pods, jobPod, namespaceCtrl, "Background", true, 2, false},
		"namespace deletion: a bare pod is not held":                       {pods, barePod, namespaceCtrl, "Background", true, 2, false},
		"namespace deletion: the workload itself (its finalizer holds it)": {deployments, operatorDeploy, namespaceCtrl, "Background", true, 2, false},
		"the kubelet is never refused":                                     {pods, operatorPod, kubelet, "", true, 2, false},
		"a terminating pod is never refused":                               {pods, terminatingPod, namespaceCtrl, "Background", true, 2, false},
		"a rollout outside namespace deletion":                             {pods, operatorPod, replicasetCtrl, "Background", false, 2, false},
		"a ReplicaSet outside namespace deletion":                          {rss, operatorRS, "alice", "Background", false, 2, false},
		"foreground deletion of a member while later groups remain":        {deployments, operatorDeploy, "alice", "Foreground", false, 2, true},
		"foreground deletion once later groups are gone":                   {deployments, operatorDeploy, "alice", "Foreground", false, 0, false},
		"background deletion of a member":                                  {deployments, operatorDeploy, "alice", "Background", false, 2, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := &DeleteServer{Policies: policy.NewStaticStore(&policy.Index{}), Check: &teardown.Check{Later: laterGroups{"shop": tc.later},
				Namespaces: terminating{"shop": tc.nsDeleting}}}
			out := serveDelete(t, s, tc.resource, tc.object, tc.user, tc.propagation)
			if out.Allowed == tc.wantDenied {
				t.Fatalf("allowed = %v, want %v (%+v)", out.Allowed, !tc.wantDenied, out.Result)
			}
			if tc.wantDenied && out.Result.Code != http.StatusConflict {
				t.Errorf("code = %d, want 409 Conflict (retryable)", out.Result.Code)
			}
			if tc.wantDenied && tc.propagation != "Foreground" && !strings.Contains(out.Result.Message, `until group(s) instances of sequence "shop" are gone (2 objects remain)`) {
				t.Errorf("message %q does not say what it waits for", out.Result.Message)
			}
		})
	}
}

func serveDelete(t *testing.T, s *DeleteServer, resource [2]string, object, user, propagation string) *admissionv1.AdmissionResponse {
	t.Helper()
	kind := map[string]string{"pods": "Pod", "replicasets": "ReplicaSet", "deployments": "Deployment"}[resource[1]]
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
