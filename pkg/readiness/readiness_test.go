package readiness

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

func obj(apiVersion, kind string, generation int64, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": "x", "namespace": "ns", "generation": generation},
	}}
	if status != nil {
		u.Object["status"] = status
	}
	return u
}

func conds(kv ...string) []any {
	var out []any
	for i := 0; i < len(kv); i += 2 {
		out = append(out, map[string]any{"type": kv[i], "status": kv[i+1]})
	}
	return out
}

func TestCheck(t *testing.T) {
	widget := func(status map[string]any) *unstructured.Unstructured {
		return obj("example.com/v1", "Widget", 1, status)
	}
	cases := map[string]struct {
		obj    *unstructured.Unstructured
		policy wavev1.Readiness
		want   Status
	}{
		// kstatus calls a started Job Current; wavegate waits for Complete.
		"started job":  {obj: obj("batch/v1", "Job", 1, map[string]any{"active": int64(1), "startTime": "2026-01-01T00:00:00Z"}), want: InProgress},
		"complete job": {obj: obj("batch/v1", "Job", 1, map[string]any{"conditions": conds("Complete", "True"), "succeeded": int64(1)}), want: Ready},
		"failed job":   {obj: obj("batch/v1", "Job", 1, map[string]any{"conditions": conds("Failed", "True")}), want: Failed},
		// kstatus calls a Failed pod Current.
		"failed pod":        {obj: obj("v1", "Pod", 1, map[string]any{"phase": "Failed"}), want: Failed},
		"running ready pod": {obj: obj("v1", "Pod", 1, map[string]any{"phase": "Running", "conditions": conds("Ready", "True")}), want: Ready},
		"running unready":   {obj: obj("v1", "Pod", 1, map[string]any{"phase": "Running", "conditions": conds("Ready", "False")}), want: InProgress},
		"stale deployment": {obj: obj("apps/v1", "Deployment", 2, map[string]any{"observedGeneration": int64(1), "replicas": int64(1),
			"readyReplicas": int64(1), "availableReplicas": int64(1), "updatedReplicas": int64(1), "conditions": conds("Available", "True")}), want: InProgress},
		"available deployment": {obj: func() *unstructured.Unstructured {
			u := obj("apps/v1", "Deployment", 2, map[string]any{"observedGeneration": int64(2), "replicas": int64(1),
				"readyReplicas": int64(1), "availableReplicas": int64(1), "updatedReplicas": int64(1), "conditions": conds("Available", "True")})
			u.Object["spec"] = map[string]any{"replicas": int64(1)}
			return u
		}(), want: Ready},
		"configmap": {obj: obj("v1", "ConfigMap", 0, nil), want: Ready},
		// kstatus calls a CR without status Current.
		"cr without status":               {obj: widget(nil), want: InProgress},
		"cr without status, assumed":      {obj: widget(nil), policy: wavev1.Readiness{AssumeReadyWithoutConditions: true}, want: Ready},
		"cr ready":                        {obj: widget(map[string]any{"conditions": conds("Ready", "True")}), want: Ready},
		"cr not ready":                    {obj: widget(map[string]any{"conditions": conds("Ready", "False")}), want: InProgress},
		"cr stalled":                      {obj: widget(map[string]any{"conditions": conds("Stalled", "True")}), want: Failed},
		"cr with a stale ready condition": {obj: widget(map[string]any{"observedGeneration": int64(0), "conditions": conds("Ready", "True")}), want: InProgress},
		"cel current": {
			obj:    widget(map[string]any{"phase": "Running"}),
			policy: wavev1.Readiness{Rules: []wavev1.ReadinessRule{{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.status.phase == 'Running'", Failed: "self.status.phase == 'Error'"}}},
			want:   Ready,
		},
		"cel failed": {
			obj:    widget(map[string]any{"phase": "Error"}),
			policy: wavev1.Readiness{Rules: []wavev1.ReadinessRule{{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.status.phase == 'Running'", Failed: "self.status.phase == 'Error'"}}},
			want:   Failed,
		},
		"cel over a missing field is not ready": {
			obj:    widget(nil),
			policy: wavev1.Readiness{Rules: []wavev1.ReadinessRule{{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.status.phase == 'Running'"}}},
			want:   InProgress,
		},
		"being deleted": {obj: func() *unstructured.Unstructured {
			u := obj("v1", "ConfigMap", 0, nil)
			u.Object["metadata"].(map[string]any)["deletionTimestamp"] = "2026-01-01T00:00:00Z"
			return u
		}(), want: InProgress},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := NewChecker(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			got := c.Check(tc.obj)
			if diff := cmp.Diff(tc.want, got.Status); diff != "" {
				t.Errorf("Check() (-want,+got):\n%s (message %q)", diff, got.Message)
			}
		})
	}
}

func TestBadRulesAreErrorsNamingTheRule(t *testing.T) {
	_, err := NewChecker(wavev1.Readiness{Rules: []wavev1.ReadinessRule{
		{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.status.phase == 'Running'"},
		{APIVersion: "example.com/v1", Kind: "Gadget", Current: "self.status.("},
	}})
	if err == nil || !cmp.Equal(err.Error()[:len("readiness.rules[1].current")], "readiness.rules[1].current") {
		t.Errorf("err = %v, want one naming readiness.rules[1].current", err)
	}
}
