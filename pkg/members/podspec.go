package members

import "k8s.io/apimachinery/pkg/runtime/schema"

// podSpecPaths are the kinds whose pods wavegate can see the references of, and where their pod
// spec is.
var podSpecPaths = map[schema.GroupKind][]string{
	{Group: "apps", Kind: "Deployment"}:  {"spec", "template", "spec"},
	{Group: "apps", Kind: "StatefulSet"}: {"spec", "template", "spec"},
	{Group: "apps", Kind: "DaemonSet"}:   {"spec", "template", "spec"},
	{Group: "apps", Kind: "ReplicaSet"}:  {"spec", "template", "spec"},
	{Group: "batch", Kind: "Job"}:        {"spec", "template", "spec"},
	{Group: "batch", Kind: "CronJob"}:    {"spec", "jobTemplate", "spec", "template", "spec"},
	{Kind: "Pod"}:                        {"spec"},
}

// PodSpecPath returns where the pod spec of a workload kind is (a pod's own for Pods), and false
// for kinds that make no pods wavegate knows of.
func PodSpecPath(gk schema.GroupKind) ([]string, bool) {
	p, ok := podSpecPaths[gk]
	return p, ok
}
