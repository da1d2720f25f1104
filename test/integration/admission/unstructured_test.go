package admission

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// unstructuredDeployment is a Deployment manifest as a GitOps tool sends it: only the fields in Git.
type unstructuredDeployment struct{ u *unstructured.Unstructured }

func (d *unstructuredDeployment) Obj() *unstructured.Unstructured { return d.u }

func newUnstructuredDeployment(ns, name string, l map[string]string) *unstructuredDeployment {
	ls := map[string]any{}
	for k, v := range l {
		ls[k] = v
	}
	return &unstructuredDeployment{u: &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   map[string]any{"name": name, "namespace": ns, "labels": ls},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": name}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}},
			},
		},
	}}}
}
