// Package rbac checks the RBAC wavegate installs (config/default, rendered as `kubectl apply -k`
// would) against an allowlist: least privilege, no wildcards, Secrets only for its own
// certificate in its own namespace, no escalate, bind or impersonate.
package rbac

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"wavegate.io/wavegate/test/framework"
)

// allowed lists, per "group/resource", the verbs wavegate may hold cluster-wide. Anything else in
// a ClusterRole fails the test: a new permission is a reviewed change of this list.
var allowed = map[string][]string{
	"wavegate.io/wavepolicies":                       {"get", "list", "watch"},
	"wavegate.io/wavepolicies/status":                {"get", "patch", "update"},
	"wavegate.io/sequences":                          {"create", "delete", "get", "list", "watch"},
	"wavegate.io/sequences/status":                   {"get", "patch", "update"},
	"batch/jobs":                                     {"create", "delete", "get", "list", "patch", "watch"},
	"batch/cronjobs":                                 {"get", "list", "patch", "watch"},
	"/pods":                                          {"get", "list", "patch", "watch"},
	"/namespaces":                                    {"get", "list", "watch"},
	"/serviceaccounts":                               {"create", "delete", "get", "list", "patch", "update", "watch"},
	"/configmaps":                                    {"get", "list", "patch", "watch"},
	"/services":                                      {"get", "list", "patch", "watch"},
	"/persistentvolumeclaims":                        {"get", "list", "patch", "watch"},
	"apps/deployments":                               {"get", "list", "patch", "watch"},
	"apps/statefulsets":                              {"get", "list", "patch", "watch"},
	"apps/daemonsets":                                {"get", "list", "patch", "watch"},
	"apps/replicasets":                               {"get", "list", "patch", "watch"},
	"rbac.authorization.k8s.io/roles":                {"create", "delete", "get", "list", "patch", "update", "watch"},
	"rbac.authorization.k8s.io/rolebindings":         {"create", "delete", "get", "list", "patch", "update", "watch"},
	"rbac.authorization.k8s.io/clusterroles":         {"create", "delete", "get", "list", "patch", "update", "watch"},
	"rbac.authorization.k8s.io/clusterrolebindings":  {"create", "delete", "get", "list", "patch", "update", "watch"},
	"networking.k8s.io/ingresses":                    {"get", "list", "patch", "watch"},
	"networking.k8s.io/networkpolicies":              {"get", "list", "patch", "watch"},
	"policy/poddisruptionbudgets":                    {"get", "list", "patch", "watch"},
	"apiextensions.k8s.io/customresourcedefinitions": {"get", "list", "patch", "watch"},
	// A claim's readiness depends on its StorageClass (WaitForFirstConsumer); waiters get the same read.
	"storage.k8s.io/storageclasses":                                {"get", "list", "watch"},
	"admissionregistration.k8s.io/mutatingwebhookconfigurations":   {"get", "list", "patch", "update", "watch"},
	"admissionregistration.k8s.io/validatingwebhookconfigurations": {"get", "list", "patch", "update", "watch"},
	"authorization.k8s.io/selfsubjectrulesreviews":                 {"create"},
	"events.k8s.io/events":                                         {"create", "patch"},
	"coordination.k8s.io/leases":                                   {"create", "delete", "get", "list", "patch", "update", "watch"},
	"/events":                                                      {"create", "patch"},
	"/secrets":                                                     {"create", "get", "update"},
}

type role struct {
	kind, name, namespace string
	rules                 []rbacv1.PolicyRule
}

func render(t *testing.T) []role {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root, "config", "default"))
	if err != nil {
		t.Fatalf("rendering config/default: %v", err)
	}
	var out []role
	for _, r := range m.Resources() {
		if r.GetKind() != "ClusterRole" && r.GetKind() != "Role" {
			continue
		}
		b, _ := r.AsYAML()
		var cr rbacv1.ClusterRole
		if err := yaml.Unmarshal(b, &cr); err != nil {
			t.Fatal(err)
		}
		out = append(out, role{r.GetKind(), cr.Name, cr.Namespace, cr.Rules})
	}
	if len(out) == 0 {
		t.Fatal("config/default renders no roles")
	}
	return out
}

func TestRBACAllowlist(t *testing.T) {
	for _, r := range render(t) {
		for _, rule := range r.rules {
			where := fmt.Sprintf("%s %s rule %v", r.kind, r.name, rule)
			for _, list := range [][]string{rule.Verbs, rule.Resources, rule.APIGroups} {
				if slices.Contains(list, "*") {
					t.Errorf("%s: wildcard", where)
				}
			}
			for _, v := range rule.Verbs {
				if v == "escalate" || v == "bind" || v == "impersonate" {
					t.Errorf("%s: verb %s", where, v)
				}
			}
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					key := g + "/" + res
					ok, known := allowed[key]
					if !known {
						t.Errorf("%s: %s is not in the allowlist", where, key)
						continue
					}
					for _, v := range rule.Verbs {
						if !slices.Contains(ok, v) {
							t.Errorf("%s: verb %s on %s is not in the allowlist", where, v, key)
						}
					}
					if res == "secrets" {
						secretRule(t, r, rule)
					}
				}
			}
		}
	}
}

// secretRule: Secrets only in wavegate's namespace (a Role), and only its own certificate Secret,
// except create, which Kubernetes cannot narrow to a name.
func secretRule(t *testing.T, r role, rule rbacv1.PolicyRule) {
	t.Helper()
	if r.kind != "Role" || r.namespace != "wavegate-system" {
		t.Errorf("%s %s grants Secrets outside wavegate's namespace", r.kind, r.name)
	}
	verbs := slices.Clone(rule.Verbs)
	sort.Strings(verbs)
	if strings.Join(verbs, ",") != "create" && !slices.Equal(rule.ResourceNames, []string{"wavegate-webhook-certs"}) {
		t.Errorf("%s %s: Secret access %v is not limited to wavegate-webhook-certs", r.kind, r.name, rule.Verbs)
	}
}

// TestAggregation: the manager's binding names the aggregated ClusterRole, and users extend it with
// the documented label.
func TestAggregation(t *testing.T) {
	for _, r := range render(t) {
		if r.name == "wavegate-manager-aggregate-role" {
			return
		}
	}
	t.Error("config/default has no wavegate-manager-aggregate-role")
}
