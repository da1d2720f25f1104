package mutate

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// partialObject is the part of an admitted object that wavegate reads. Decoding only these fields
// keeps the review path cheap for large objects; everything else is skipped by the decoder.
type partialObject struct {
	Metadata partialMeta `json:"metadata"`
	Spec     *struct {
		Template    *podTemplate `json:"template"`
		JobTemplate *struct {
			Spec *struct {
				Template *podTemplate `json:"template"`
			} `json:"spec"`
		} `json:"jobTemplate"`
		SchedulingGates []struct {
			Name string `json:"name"`
		} `json:"schedulingGates"`
	} `json:"spec"`
}

type partialMeta struct {
	Labels            map[string]string `json:"labels"`
	Annotations       map[string]string `json:"annotations"`
	Finalizers        []string          `json:"finalizers"`
	DeletionTimestamp *v1.Time          `json:"deletionTimestamp"`
}

type podTemplate struct {
	Metadata *struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
}

// templateKinds are the workloads whose pod templates carry the group identity, with the JSON
// pointer of their template.
var templateKinds = map[schema.GroupKind]string{
	{Group: "apps", Kind: "Deployment"}:  "/spec/template",
	{Group: "apps", Kind: "StatefulSet"}: "/spec/template",
	{Group: "apps", Kind: "DaemonSet"}:   "/spec/template",
	{Group: "apps", Kind: "ReplicaSet"}:  "/spec/template",
	{Group: "batch", Kind: "Job"}:        "/spec/template",
	{Group: "batch", Kind: "CronJob"}:    "/spec/jobTemplate/spec/template",
}

// template returns the pod template of a workload and its JSON pointer, or nil.
func (o *partialObject) template(gk schema.GroupKind) (*podTemplate, string) {
	path, ok := templateKinds[gk]
	if !ok || o.Spec == nil {
		return nil, ""
	}
	if gk.Kind == "CronJob" {
		if o.Spec.JobTemplate == nil || o.Spec.JobTemplate.Spec == nil || o.Spec.JobTemplate.Spec.Template == nil {
			return nil, ""
		}
		return o.Spec.JobTemplate.Spec.Template, path
	}
	if o.Spec.Template == nil {
		return nil, ""
	}
	return o.Spec.Template, path
}
