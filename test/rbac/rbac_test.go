// Package rbac checks the RBAC wavegate installs (config/default and config/self-managed, rendered
// as `kubectl apply -k` would) against an allowlist: least privilege, no wildcards, Secrets only for
// its own certificate in its own namespace and only when it manages that certificate itself, no
// impersonate, and escalate and bind only on the waiters' Roles (named wavegate-waiter), in an
// install whose admission policy bounds what those Roles hold.
package rbac

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/test/framework"
)

// allowed lists, per "group/resource", the verbs wavegate may hold cluster-wide. Anything else in
// a ClusterRole fails the test: a new permission is a reviewed change of this list.
var allowed = map[string][]string{
	"wavegate.io/wavepolicies":        {"get", "list", "watch"},
	"wavegate.io/wavepolicies/status": {"get", "patch", "update"},
	"wavegate.io/sequences":           {"create", "delete", "get", "list", "watch"},
	"wavegate.io/sequences/status":    {"get", "patch", "update"},
	"batch/jobs":                      {"create", "delete", "get", "list", "patch", "watch"},
	"batch/cronjobs":                  {"get", "list", "patch", "watch"},
	// delete: a pod that holds a later group's claim in a namespace being deleted (manager-writes
	// policy: only there).
	"/pods":                                  {"delete", "get", "list", "patch", "watch"},
	"/namespaces":                            {"get", "list", "watch"},
	"/serviceaccounts":                       {"create", "delete", "get", "list", "patch", "update", "watch"},
	"/configmaps":                            {"get", "list", "patch", "watch"},
	"/services":                              {"get", "list", "patch", "watch"},
	"/persistentvolumeclaims":                {"get", "list", "patch", "watch"},
	"apps/deployments":                       {"get", "list", "patch", "watch"},
	"apps/statefulsets":                      {"get", "list", "patch", "watch"},
	"apps/daemonsets":                        {"get", "list", "patch", "watch"},
	"apps/replicasets":                       {"get", "list", "patch", "watch"},
	"rbac.authorization.k8s.io/roles":        {"bind", "create", "delete", "escalate", "get", "list", "patch", "update", "watch"},
	"rbac.authorization.k8s.io/rolebindings": {"create", "delete", "get", "list", "patch", "update", "watch"},
	"rbac.authorization.k8s.io/clusterroles": {"create", "delete", "get", "list", "patch", "update", "watch"},
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
	// Members of these kinds are tracked, never finalized (patching an APIService could redirect an
	// API group).
	"autoscaling/horizontalpodautoscalers": {"get", "list", "watch"},
	"apiregistration.k8s.io/apiservices":   {"get", "list", "watch"},
	"events.k8s.io/events":                 {"create", "patch"},
	"coordination.k8s.io/leases":           {"create", "delete", "get", "list", "patch", "update", "watch"},
	"/events":                              {"create", "patch"},
	"/secrets":                             {"create", "get", "update"},
}

type role struct {
	kind, name, namespace string
	labels                map[string]string
	rules                 []rbacv1.PolicyRule
}

// installs are the kustomizations a user applies.
var installs = []string{"default", "self-managed"}

// resources renders config/<install> as `kubectl apply -k` would.
func resources(t *testing.T, install string) []*resource.Resource {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root, "config", install))
	if err != nil {
		t.Fatalf("rendering config/%s: %v", install, err)
	}
	return m.Resources()
}

// render returns the roles and role bindings of config/<install>.
func render(t *testing.T, install string) ([]role, []rbacv1.RoleBinding) {
	t.Helper()
	var out []role
	var bindings []rbacv1.RoleBinding
	for _, r := range resources(t, install) {
		b, _ := r.AsYAML()
		switch r.GetKind() {
		case "ClusterRole", "Role":
			var cr rbacv1.ClusterRole
			if err := yaml.Unmarshal(b, &cr); err != nil {
				t.Fatal(err)
			}
			out = append(out, role{r.GetKind(), cr.Name, cr.Namespace, cr.Labels, cr.Rules})
		case "RoleBinding":
			var rb rbacv1.RoleBinding
			if err := yaml.Unmarshal(b, &rb); err != nil {
				t.Fatal(err)
			}
			bindings = append(bindings, rb)
		}
	}
	if len(out) == 0 {
		t.Fatalf("config/%s renders no roles", install)
	}
	return out, bindings
}

func TestRBACAllowlist(t *testing.T) {
	for _, install := range installs {
		roles, _ := render(t, install)
		t.Run(install, func(t *testing.T) { allowlist(t, roles) })
	}
}

func allowlist(t *testing.T, roles []role) {
	for _, r := range roles {
		for _, rule := range r.rules {
			where := fmt.Sprintf("%s %s rule %v", r.kind, r.name, rule)
			for _, list := range [][]string{rule.Verbs, rule.Resources, rule.APIGroups} {
				if slices.Contains(list, "*") {
					t.Errorf("%s: wildcard", where)
				}
			}
			for _, v := range rule.Verbs {
				switch {
				case v == "impersonate":
					t.Errorf("%s: verb %s", where, v)
				case (v == "escalate" || v == "bind") && !waiterRoles(rule):
					t.Errorf("%s: verb %s on more than the Roles named wavegate-waiter", where, v)
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

// waiterRoles reports whether a rule is on the waiters' Roles alone: escalate and bind there let
// the manager write a waiter's rules and binding without the API server checking each write
// against its own rules (TestEscalateOnlyWithThePolicy).
func waiterRoles(rule rbacv1.PolicyRule) bool {
	return slices.Equal(rule.APIGroups, []string{rbacv1.GroupName}) && slices.Equal(rule.Resources, []string{"roles"}) &&
		slices.Equal(rule.ResourceNames, []string{"wavegate-waiter"})
}

// TestEscalateOnlyWithThePolicy: an install that grants escalate on the waiters' Roles installs the
// admission policy that bounds them (read only, no subresources, no Secrets, patch wait Jobs by
// name; the roles the manager did not make keep their rules), bound to deny.
func TestEscalateOnlyWithThePolicy(t *testing.T) {
	for _, install := range installs {
		roles, _ := render(t, install)
		escalates := slices.ContainsFunc(roles, func(r role) bool {
			return slices.ContainsFunc(r.rules, func(rule rbacv1.PolicyRule) bool { return slices.Contains(rule.Verbs, "escalate") })
		})
		if !escalates {
			continue
		}
		policy, binding := false, false
		for _, r := range resources(t, install) {
			switch {
			case r.GetKind() == "ValidatingAdmissionPolicy" && r.GetName() == "wavegate-manager-writes":
				policy = true
			case r.GetKind() == "ValidatingAdmissionPolicyBinding" && r.GetName() == "wavegate-manager-writes":
				b, _ := r.AsYAML()
				var vb struct {
					Spec struct {
						PolicyName        string   `json:"policyName"`
						ValidationActions []string `json:"validationActions"`
					} `json:"spec"`
				}
				if err := yaml.Unmarshal(b, &vb); err != nil {
					t.Fatal(err)
				}
				binding = vb.Spec.PolicyName == "wavegate-manager-writes" && slices.Contains(vb.Spec.ValidationActions, "Deny")
			}
		}
		if !policy || !binding {
			t.Errorf("config/%s grants escalate on the waiters' Roles without the manager-writes policy bound to deny (policy %v, binding %v)", install, policy, binding)
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

// TestSecretsOnlyForSelfManagedCertificates: the install that issues its own certificate can
// create its Secret and read and update it by name, in its own namespace, bound to the manager's
// ServiceAccount; the cert-manager install has no access to Secrets at all.
func TestSecretsOnlyForSelfManagedCertificates(t *testing.T) {
	for _, install := range installs {
		roles, bindings := render(t, install)
		verbs := map[string]bool{}
		for _, r := range roles {
			bound := slices.ContainsFunc(bindings, func(b rbacv1.RoleBinding) bool {
				return b.Namespace == r.namespace && b.RoleRef.Kind == r.kind && b.RoleRef.Name == r.name &&
					slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
						return s.Kind == "ServiceAccount" && s.Name == "wavegate-manager" && s.Namespace == "wavegate-system"
					})
			})
			for _, rule := range r.rules {
				if !slices.Contains(rule.Resources, "secrets") {
					continue
				}
				if !bound {
					t.Errorf("config/%s: %s %s grants Secrets but is not bound to the manager", install, r.kind, r.name)
				}
				for _, v := range rule.Verbs {
					verbs[v] = true
				}
			}
		}
		want := map[string]bool{}
		if install == "self-managed" {
			want = map[string]bool{"create": true, "get": true, "update": true}
		}
		if !maps.Equal(want, verbs) {
			t.Errorf("config/%s: the manager's verbs on Secrets are %v, want %v", install, verbs, want)
		}
	}
}

// TestAccessObjectsDeletedOnlyByName: the manager deletes, or changes other than by a patch (which
// its teardown finalizer needs on any member), only the waiters' ServiceAccounts, Roles and bindings,
// all named wavegate-waiter, and the ClusterRole and ClusterRoleBinding that let waiters read
// StorageClasses (wavegate-waiter-storageclasses); it can delete no other account or role of any
// tenant.
func TestAccessObjectsDeletedOnlyByName(t *testing.T) {
	waiter := []string{"wavegate-waiter"}
	clusterWide := []string{"wavegate-waiter", "wavegate-waiter-storageclasses"}
	guarded := map[string][]string{
		"serviceaccounts": waiter, "roles": waiter, "rolebindings": waiter,
		"clusterroles": clusterWide, "clusterrolebindings": clusterWide,
	}
	for _, install := range installs {
		roles, _ := render(t, install)
		for _, r := range roles {
			for _, rule := range r.rules {
				for _, res := range rule.Resources {
					names, ok := guarded[res]
					if !ok {
						continue
					}
					byName := len(rule.ResourceNames) > 0 && !slices.ContainsFunc(rule.ResourceNames, func(n string) bool { return !slices.Contains(names, n) })
					for _, v := range rule.Verbs {
						if (v == "delete" || v == "update" || v == "deletecollection") && !byName {
							t.Errorf("config/%s: %s %s may %s %s not named %v", install, r.kind, r.name, v, res, names)
						}
					}
				}
			}
		}
	}
}

// TestAggregation: the manager's binding names the aggregated ClusterRole, and users extend it with
// the documented label.
func TestAggregation(t *testing.T) {
	roles, _ := render(t, "default")
	for _, r := range roles {
		if r.name == "wavegate-manager-aggregate-role" {
			return
		}
	}
	t.Error("config/default has no wavegate-manager-aggregate-role")
}

// memberKinds are the kinds of the README's readiness table that can be group members (pods are
// gated, not members): the shipped roles must let the member tracker track them, or their groups
// would be released without waiting for them.
var memberKinds = []string{
	"apps/deployments", "apps/replicasets", "apps/statefulsets", "apps/daemonsets", "batch/jobs", "batch/cronjobs",
	"/persistentvolumeclaims", "/services", "networking.k8s.io/ingresses", "autoscaling/horizontalpodautoscalers",
	"policy/poddisruptionbudgets", "apiextensions.k8s.io/customresourcedefinitions", "apiregistration.k8s.io/apiservices",
}

// TestMemberKindsAreTracked: with the ClusterRoles the manager aggregates (those labeled
// wavegate.io/aggregate-to-manager), it may list and watch every kind of the readiness table, and
// every kind it may patch (to add and remove the teardown finalizer) it may also list and watch:
// admission adds the finalizer only to kinds the tracker tracks, since the hold removes it only from
// objects it sees, so a patch grant without them would order no teardown.
func TestMemberKindsAreTracked(t *testing.T) {
	for _, install := range installs {
		roles, _ := render(t, install)
		verbs := map[string][]string{} // "group/resource" -> verbs on every object of it
		for _, r := range roles {
			if r.kind != "ClusterRole" || r.labels[keys.AggregateToManagerLabel] != "true" {
				continue
			}
			for _, rule := range r.rules {
				if len(rule.ResourceNames) > 0 {
					continue // grants nothing on the objects of users
				}
				for _, g := range rule.APIGroups {
					for _, res := range rule.Resources {
						verbs[g+"/"+res] = append(verbs[g+"/"+res], rule.Verbs...)
					}
				}
			}
		}
		if len(verbs) == 0 {
			t.Fatalf("config/%s: no ClusterRole labeled %s=true", install, keys.AggregateToManagerLabel)
		}
		tracked := func(key string) bool {
			return slices.Contains(verbs[key], "list") && slices.Contains(verbs[key], "watch")
		}
		for _, key := range memberKinds {
			if !tracked(key) {
				t.Errorf("config/%s: the manager may not list and watch %s, a kind of the readiness table: its members would not be ordered", install, key)
			}
		}
		for key, vs := range verbs {
			g, res, _ := strings.Cut(key, "/")
			if strings.Contains(res, "/") {
				continue // a subresource: no object carries a finalizer through it
			}
			if slices.Contains(vs, "patch") && !tracked(key) && !members.Skipped(schema.GroupResource{Group: g, Resource: res}) {
				t.Errorf("config/%s: the manager may patch %s but not list and watch it: admission would add no finalizer to its members", install, key)
			}
		}
	}
}
