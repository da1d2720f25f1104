package mutate

import (
	"fmt"

	"github.com/valyala/fastjson"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"wavegate.io/wavegate/pkg/keys"
)

// partialObject is the part of an admitted object that wavegate reads. Reading only these fields
// keeps the review path cheap for large objects.
type partialObject struct {
	Labels      map[string]string
	Annotations map[string]string
	Deleting    bool
	// Finalizers holds metadata.finalizers; HasFinalizers is true when the list is present.
	Finalizers    []string
	HasFinalizers bool
	// Controller is the UID of the object's controller, "" without one; ControllerKind and
	// ControllerName its kind and name.
	Controller, ControllerKind, ControllerName string
	// HasGates is true when spec.schedulingGates is present; Gated when it holds wavegate's gate.
	HasGates, Gated bool
	// NodeName is a pod's spec.nodeName.
	NodeName string
	// Template is the pod template of a workload, nil for other kinds.
	Template *podTemplate
	// Deadline is the activeDeadlineSeconds of a Job, or of a CronJob's Jobs, with its path ("":
	// none).
	Deadline, DeadlinePath string
}

// deadlinePaths are where the kinds whose Jobs have a deadline keep it.
var deadlinePaths = map[schema.GroupKind][]string{
	{Group: "batch", Kind: "Job"}:     {"spec", "activeDeadlineSeconds"},
	{Group: "batch", Kind: "CronJob"}: {"spec", "jobTemplate", "spec", "activeDeadlineSeconds"},
}

type podTemplate struct {
	// Path is the JSON pointer of the template.
	Path string
	// HasMetadata is false when the template has no metadata at all.
	HasMetadata bool
	Labels      map[string]string
}

// templatePaths are the workloads whose pod templates carry the group identity, with the path of
// their template.
var templatePaths = map[schema.GroupKind][]string{
	{Group: "apps", Kind: "Deployment"}:  {"spec", "template"},
	{Group: "apps", Kind: "StatefulSet"}: {"spec", "template"},
	{Group: "apps", Kind: "DaemonSet"}:   {"spec", "template"},
	{Group: "apps", Kind: "ReplicaSet"}:  {"spec", "template"},
	{Group: "batch", Kind: "Job"}:        {"spec", "template"},
	{Group: "batch", Kind: "CronJob"}:    {"spec", "jobTemplate", "spec", "template"},
}

// decodeObject reads a parsed object. It fails, naming the field, when a field wavegate reads has
// the wrong JSON type.
func decodeObject(v *fastjson.Value, gk schema.GroupKind) (*partialObject, error) {
	if v.Type() != fastjson.TypeObject {
		return nil, fmt.Errorf("the object is a JSON %s, not an object", v.Type())
	}
	o := &partialObject{}
	var err error
	if o.Labels, err = stringMap(v, "metadata", "labels"); err != nil {
		return nil, err
	}
	if o.Annotations, err = stringMap(v, "metadata", "annotations"); err != nil {
		return nil, err
	}
	if ts := v.Get("metadata", "deletionTimestamp"); ts != nil && ts.Type() != fastjson.TypeNull {
		o.Deleting = true
	}
	if fs := v.Get("metadata", "finalizers"); fs != nil && fs.Type() == fastjson.TypeArray {
		o.HasFinalizers = true
		for _, f := range fs.GetArray() {
			o.Finalizers = append(o.Finalizers, string(f.GetStringBytes()))
		}
	}
	for _, ref := range v.GetArray("metadata", "ownerReferences") {
		if ref.GetBool("controller") {
			o.Controller = string(ref.GetStringBytes("uid"))
			o.ControllerKind, o.ControllerName = string(ref.GetStringBytes("kind")), string(ref.GetStringBytes("name"))
		}
	}
	if gates := v.Get("spec", "schedulingGates"); gates != nil && gates.Type() == fastjson.TypeArray {
		o.HasGates = true
		for _, g := range gates.GetArray() {
			if string(g.GetStringBytes("name")) == keys.SchedulingGate {
				o.Gated = true
			}
		}
	}
	if gk.Group == "" && gk.Kind == "Pod" {
		o.NodeName = string(v.GetStringBytes("spec", "nodeName"))
	}
	if path, ok := deadlinePaths[gk]; ok {
		if d := v.Get(path...); d != nil && d.Type() == fastjson.TypeNumber {
			o.Deadline, o.DeadlinePath = d.String(), dotted(path)
		}
	}
	if path, ok := templatePaths[gk]; ok {
		if tpl := v.Get(path...); tpl != nil && tpl.Type() == fastjson.TypeObject {
			o.Template = &podTemplate{Path: pointer(path)}
			if md := tpl.Get("metadata"); md != nil && md.Type() != fastjson.TypeNull {
				o.Template.HasMetadata = true
				if o.Template.Labels, err = stringMap(md, "labels"); err != nil {
					return nil, fmt.Errorf("%s.metadata.%w", dotted(path), err)
				}
			}
		}
	}
	return o, nil
}

// stringMap reads a JSON object of strings; a missing or null one is nil.
func stringMap(v *fastjson.Value, path ...string) (map[string]string, error) {
	f := v.Get(path...)
	if f == nil || f.Type() == fastjson.TypeNull {
		return nil, nil
	}
	obj, err := f.Object()
	if err != nil {
		return nil, fmt.Errorf("%s: must be an object of strings", dotted(path))
	}
	out := make(map[string]string, obj.Len())
	obj.Visit(func(k []byte, val *fastjson.Value) {
		if err != nil {
			return
		}
		s, e := val.StringBytes()
		if e != nil {
			err = fmt.Errorf("%s[%s]: must be a string", dotted(path), k)
			return
		}
		out[string(k)] = string(s)
	})
	return out, err
}

func pointer(path []string) string {
	s := ""
	for _, p := range path {
		s += "/" + p
	}
	return s
}

func dotted(path []string) string {
	s := ""
	for i, p := range path {
		if i > 0 {
			s += "."
		}
		s += p
	}
	return s
}

// templateToken is the pod's template identity, as sequence.TemplateToken computes it from a pod.
func (o *partialObject) templateToken() string {
	if o.Controller == "" {
		return ""
	}
	for _, k := range keys.TemplateHashLabelsOf(o.ControllerKind) {
		if v, ok := o.Labels[k]; ok {
			return o.Controller + "/" + v
		}
	}
	return o.Controller
}
