package sequence

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/readiness"
)

// ConditionDependencyInversion is True while a member waits on an object of a later group.
const ConditionDependencyInversion = "DependencyInversion"

// ReasonDependencyInversion is the Event reason that names an inversion.
const ReasonDependencyInversion = "DependencyInversion"

// Inversion is a member of one group whose pods use an object that belongs to a later group of
// the same sequence: the member cannot become ready before the later group, which waits for it.
type Inversion struct {
	Member, Dependency             Member
	MemberGroup, DependencyGroup   string
	MemberOrder, DependencyOrder   int32
	DependencyKind, DependencyName string
	// Use says how the member uses the dependency ("mounts", "uses").
	Use string
}

// Message names both objects and the fix.
func (i Inversion) Message() string {
	return fmt.Sprintf("%s %s/%s (group %s) %s %s %s/%s of the later group %s: move %s %s to group %s or earlier, or %s %s to group %s or later",
		i.Member.Kind, i.Member.Namespace, i.Member.Name, i.MemberGroup, i.Use, i.DependencyKind, i.Dependency.Namespace, i.DependencyName,
		i.DependencyGroup, i.DependencyKind, i.DependencyName, i.MemberGroup, i.Member.Kind, i.Member.Name, i.DependencyGroup)
}

type objectRef struct {
	kind, namespace, name string
}

// podReferences returns the namespaced objects a workload's pods need to start: PVCs, ConfigMaps
// and Secrets they mount or read, and their ServiceAccount. Secrets are listed although wavegate
// never reads them: a Secret is never a member it tracks.
func podReferences(gk schema.GroupKind, u *unstructured.Unstructured) map[objectRef]string {
	path, ok := members.PodSpecPath(gk)
	if !ok {
		return nil
	}
	raw, found, err := unstructured.NestedMap(u.Object, path...)
	if !found || err != nil {
		return nil
	}
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
		return nil
	}
	ns := u.GetNamespace()
	refs := map[objectRef]string{}
	add := func(kind, name, use string) {
		if name != "" {
			refs[objectRef{kind, ns, name}] = use
		}
	}
	sa := spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	add("ServiceAccount", sa, "runs as")
	for _, v := range spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			add("PersistentVolumeClaim", v.PersistentVolumeClaim.ClaimName, "mounts")
		case v.ConfigMap != nil && !optional(v.ConfigMap.Optional):
			add("ConfigMap", v.ConfigMap.Name, "mounts")
		case v.Secret != nil && !optional(v.Secret.Optional):
			add("Secret", v.Secret.SecretName, "mounts")
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil && !optional(s.ConfigMap.Optional) {
					add("ConfigMap", s.ConfigMap.Name, "mounts")
				}
				if s.Secret != nil && !optional(s.Secret.Optional) {
					add("Secret", s.Secret.Name, "mounts")
				}
			}
		}
	}
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil && !optional(e.ConfigMapRef.Optional) {
				add("ConfigMap", e.ConfigMapRef.Name, "reads")
			}
			if e.SecretRef != nil && !optional(e.SecretRef.Optional) {
				add("Secret", e.SecretRef.Name, "reads")
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil && !optional(r.Optional) {
				add("ConfigMap", r.Name, "reads")
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil && !optional(r.Optional) {
				add("Secret", r.Name, "reads")
			}
		}
	}
	return refs
}

func optional(b *bool) bool { return b != nil && *b }

// memberObject is a member with the object its references are read from.
type memberObject struct {
	Member
	Object *unstructured.Unstructured
	// Open is whether the member's group may run: only a member that may run waits on anything.
	Open bool
}

// Inversions finds the members of open groups that are not ready and whose pods use an object
// that is a member of a later group of the same sequence. It is a pure function.
func Inversions(ms []memberObject) []Inversion {
	byRef := map[objectRef]*memberObject{}
	for i := range ms {
		m := &ms[i]
		byRef[objectRef{m.Kind, m.Namespace, m.Name}] = m
	}
	var out []Inversion
	for i := range ms {
		m := &ms[i]
		if !m.Open || m.Ready == nil || m.Ready.Status == readiness.Ready || m.Object == nil {
			continue
		}
		gk := schema.FromAPIVersionAndKind(m.APIVersion, m.Kind).GroupKind()
		for ref, use := range podReferences(gk, m.Object) {
			dep, ok := byRef[ref]
			if !ok || dep.Resolution.GroupOrder <= m.Resolution.GroupOrder {
				continue
			}
			out = append(out, Inversion{Member: m.Member, Dependency: dep.Member, MemberGroup: m.Resolution.Group,
				DependencyGroup: dep.Resolution.Group, MemberOrder: m.Resolution.GroupOrder, DependencyOrder: dep.Resolution.GroupOrder,
				DependencyKind: ref.kind, DependencyName: ref.name, Use: use})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Message() < out[j].Message() })
	return out
}
