package admission

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/manager"
	"wavegate.io/wavegate/pkg/sequence"
	"wavegate.io/wavegate/test/framework"
)

// asManager is a client that acts as wavegate's manager: its ServiceAccount (the name config/default
// gives it), with every permission, so that only the admission policy can refuse.
func asManager(g Gomega) client.Client {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + framework.WavegateNamespace + ":wavegate-manager",
		Groups:   []string{"system:masters", "system:authenticated"},
	}
	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

func waitJob(ns, name, account string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{keys.WaitJobLabel: "true"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			ServiceAccountName: account, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "wait", Image: "wavegate"}},
		}}},
	}
}

// TestManagerWritesOnlyWhatWavegateMakes: the manager's roles let it create Jobs, ServiceAccounts,
// roles and bindings anywhere (RBAC cannot limit a creation by name); config/rbac's admission
// policy refuses, for its ServiceAccount, anything but wait Jobs run by the waiter's ServiceAccount
// and the waiter's own access, in opted-in namespaces and its own. Each refusal names the rule.
func TestManagerWritesOnlyWhatWavegateMakes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	mgr := asManager(g)
	ns, elsewhere := namespace(t, true), namespace(t, false)
	waiter := sequence.WaiterServiceAccount

	// The API server loads a policy a moment after it is created. (A wait Job there, labeled, is
	// refused by the owned-labels policy first: TestOwnedLabelsOnlyWhereWavegateWorks.)
	g.Eventually(func() error {
		return mgr.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: waiter, Namespace: elsewhere}})
	}).WithTimeout(10 * time.Second).Should(MatchError(ContainSubstring("only in namespaces labeled wavegate.io/enabled=true")))
	g.Expect(mgr.Create(ctx, waitJob(ns, "wavegate-wait-a", waiter))).To(Succeed())
	g.Expect(mgr.Create(ctx, waitJob(framework.WavegateNamespace, "wavegate-wait-a", waiter))).To(Succeed())
	g.Expect(mgr.Create(ctx, waitJob(ns, "wavegate-wait-b", "default"))).To(MatchError(ContainSubstring("run by the ServiceAccount wavegate-waiter")))
	plain := waitJob(ns, "batch", waiter)
	plain.Labels = nil
	g.Expect(mgr.Create(ctx, plain)).To(MatchError(ContainSubstring("only wait Jobs")))
	// A wait Job is no way to a Secret's content.
	secret := corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db-password"}}
	for name, change := range map[string]func(*corev1.PodSpec){
		"secret-volume": func(s *corev1.PodSpec) { s.Volumes = []corev1.Volume{{Name: "s", VolumeSource: secret}} },
		"env-from-secret": func(s *corev1.PodSpec) {
			s.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
		},
		"env-secret-key": func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}}}
		},
		"projected-secret": func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}}}}}
		},
		"init-container-secret": func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "i", Image: "busybox",
				EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}}}
		},
	} {
		j := waitJob(ns, "wavegate-wait-"+name, waiter)
		change(&j.Spec.Template.Spec)
		g.Expect(mgr.Create(ctx, j)).To(MatchError(ContainSubstring("read no Secret")), name)
	}
	// Volumes that hold no Secret (a cluster's mutating policy may add them) are left alone.
	scratch := waitJob(ns, "wavegate-wait-scratch", waiter)
	scratch.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	g.Expect(mgr.Create(ctx, scratch)).To(Succeed())

	g.Expect(mgr.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "admin", Namespace: ns}})).
		To(MatchError(ContainSubstring("serviceaccounts only named wavegate-waiter, not admin")))
	g.Expect(mgr.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: waiter, Namespace: elsewhere}})).
		To(MatchError(ContainSubstring("only in namespaces labeled")))
	// The suite's manager provisions the waiter's ServiceAccount, Role and RoleBinding in every
	// opted-in namespace: a creation that finds them admitted it (the API server admits before it
	// stores).
	admitted := func(err error) { t.Helper(); g.Expect(client.IgnoreAlreadyExists(err)).To(Succeed()) }
	admitted(mgr.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: waiter, Namespace: ns}}))

	read := rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch"}}
	mark := rbacv1.PolicyRule{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"patch"}, ResourceNames: []string{"wavegate-wait-a"}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: waiter, Namespace: ns, Labels: map[string]string{keys.WaiterRBACLabel: "true"}},
		Rules: []rbacv1.PolicyRule{read, mark}}
	admitted(mgr.Create(ctx, role))
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(role), role)).To(Succeed())
	// The suite's manager writes the waiter's Role and RoleBinding too (their rules follow the
	// namespace's wait Jobs): an update without a resourceVersion cannot conflict with it, and
	// the policy checks it all the same.
	overwrite := func(o client.Object) error {
		o.SetResourceVersion("")
		return mgr.Update(ctx, o)
	}
	secrets := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}
	role.Rules = []rbacv1.PolicyRule{read, mark, secrets}
	g.Expect(overwrite(role)).To(MatchError(ContainSubstring("may only read")), "the waiter's Role gained a rule on Secrets")
	role.Rules = []rbacv1.PolicyRule{read, {APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"patch"}}}
	g.Expect(overwrite(role)).To(MatchError(ContainSubstring("may only read")), "the waiter's Role gained a write")
	for _, bad := range []rbacv1.PolicyRule{
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"patch"}},                                            // every Job
		{APIGroups: []string{"apps"}, Resources: []string{"jobs"}, Verbs: []string{"patch"}, ResourceNames: []string{"wavegate-wait-a"}}, // not batch
	} {
		role.Rules = []rbacv1.PolicyRule{read, bad}
		g.Expect(overwrite(role)).To(MatchError(ContainSubstring("patch wait Jobs by name")), "the waiter's Role gained %v", bad)
	}
	// The manager may write any rules into its waiter Roles (escalate, by name): the policy is what
	// keeps them to reading top-level kinds. A subresource would reach further (a pod's logs, its
	// proxy).
	for _, sub := range []string{"pods/log", "pods/proxy", "serviceaccounts/token"} {
		role.Rules = []rbacv1.PolicyRule{read, {APIGroups: []string{""}, Resources: []string{sub}, Verbs: []string{"get"}}}
		g.Expect(overwrite(role)).To(MatchError(ContainSubstring("no subresources")), "the waiter's Role gained %s", sub)
	}
	// A Role without rules (an opted-in namespace before its first wait Job) reaches the policy with
	// "rules": null.
	role.Rules = nil
	g.Expect(overwrite(role)).To(Succeed(), "the waiter's Role lost its rules")
	g.Expect(mgr.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "wavegate-reader"}, Rules: []rbacv1.PolicyRule{read}})).
		To(MatchError(ContainSubstring("only named wavegate-waiter")))
	clusterWide(t, g, mgr, ns)

	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: waiter}
	other := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: waiter, Namespace: ns}, RoleRef: ref,
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns}}}
	g.Expect(mgr.Create(ctx, other)).To(MatchError(ContainSubstring("only to ServiceAccounts named wavegate-waiter")))
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: waiter, Namespace: ns}, RoleRef: ref,
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: waiter, Namespace: ns}}}
	admitted(mgr.Create(ctx, binding))
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(binding), binding)).To(Succeed())
	binding.Subjects = nil
	g.Expect(overwrite(binding)).To(Succeed(), "the waiter's RoleBinding lost its subjects")

	// Anyone else is not checked; the manager may remove the finalizers of what it did not make (a
	// member's teardown finalizer), and nothing else of a role or binding: not even of one named like
	// the waiter's, whose rules escalate would otherwise let it rewrite, and whose binding bind would
	// let it extend. Both this policy and manager-updates (TestManagerUpdatesOnlyFinalizersAndItsGate)
	// refuse such a change; the API server names one of them.
	tenantJob := waitJob(elsewhere, "batch", "default")
	tenantJob.Labels = nil // labeled, it would be refused there by the owned-labels policy
	g.Expect(env.Client.Create(ctx, tenantJob)).To(Succeed())
	member := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "operator", Namespace: elsewhere, Finalizers: []string{keys.TeardownFinalizer}},
		Rules: []rbacv1.PolicyRule{secrets}}
	g.Expect(env.Client.Create(ctx, member)).To(Succeed())
	member.Finalizers = nil
	g.Expect(mgr.Update(ctx, member)).To(Succeed())
	member.Rules = append(member.Rules, read)
	g.Expect(mgr.Update(ctx, member)).To(MatchError(MatchRegexp("only the metadata of roles it did not make|only the finalizers of roles it did not make, not their rules")))
	lookalike := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: waiter, Namespace: elsewhere}, Rules: []rbacv1.PolicyRule{read}}
	g.Expect(env.Client.Create(ctx, lookalike)).To(Succeed())
	lookalike.Rules = []rbacv1.PolicyRule{read, secrets}
	g.Expect(mgr.Update(ctx, lookalike)).To(MatchError(MatchRegexp("not the rules of wavegate-waiter|only the finalizers of roles it did not make, not their rules")))
	tenantBinding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "operator", Namespace: elsewhere, Finalizers: []string{keys.TeardownFinalizer}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "operator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "operator", Namespace: elsewhere}}}
	g.Expect(env.Client.Create(ctx, tenantBinding)).To(Succeed())
	tenantBinding.Finalizers = nil
	g.Expect(mgr.Update(ctx, tenantBinding)).To(Succeed())
	tenantBinding.Subjects = append(tenantBinding.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "wavegate-manager", Namespace: framework.WavegateNamespace})
	g.Expect(mgr.Update(ctx, tenantBinding)).To(MatchError(MatchRegexp("not the subjects of operator|only the finalizers of rolebindings it did not make, not their subjects")))
}

// clusterWide: of the waiters' cluster-wide access, the policy admits a ClusterRole
// wavegate-waiter-storageclasses that reads StorageClasses and nothing else, bound by the
// ClusterRoleBinding of its name to any waiter, and a ClusterRoleBinding wavegate-waiter (whose
// ClusterRole reads cluster-scoped members) only to the waiter of wavegate's own namespace: a
// tenant's waiter never reads cluster-scoped members. The creations are dry runs (admission runs,
// nothing is stored for the suite's manager to prune).
func clusterWide(t *testing.T, g Gomega, mgr client.Client, tenant string) {
	t.Helper()
	ctx := context.Background()
	waiter, storageClasses := sequence.WaiterServiceAccount, sequence.WaiterStorageClassesRole
	readStorageClasses := rbacv1.PolicyRule{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}}
	readNodes := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}
	labels := map[string]string{keys.WaiterRBACLabel: "true"}
	clusterRole := func(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rules}
	}
	binding := func(name, role string, namespaces ...string) *rbacv1.ClusterRoleBinding {
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
		for _, ns := range namespaces {
			b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: waiter, Namespace: ns})
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		obj     client.Object
		refused string // "": admitted
	}{
		{"StorageClasses read", clusterRole(storageClasses, readStorageClasses), ""},
		{"more than StorageClasses", clusterRole(storageClasses, readStorageClasses, readNodes), "may only read StorageClasses"},
		{"cluster-scoped members' read", clusterRole(waiter, readNodes), ""},
		{"StorageClasses bound to a tenant's waiter", binding(storageClasses, storageClasses, tenant, framework.WavegateNamespace), ""},
		{"StorageClasses binding to the cluster-scoped members' role", binding(storageClasses, waiter, tenant), "only the waiter's role of the binding's name"},
		{"cluster-scoped members bound to wavegate's waiter", binding(waiter, waiter, framework.WavegateNamespace), ""},
		{"cluster-scoped members bound to a tenant's waiter", binding(waiter, waiter, framework.WavegateNamespace, tenant),
			"may bind the ClusterRole wavegate-waiter only to the waiter of " + framework.WavegateNamespace},
		{"a Role of the StorageClasses name", &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: storageClasses, Namespace: tenant, Labels: labels}},
			"roles only named wavegate-waiter, not " + storageClasses},
		{"a RoleBinding of the StorageClasses name", &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: storageClasses, Namespace: tenant, Labels: labels},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: storageClasses}},
			"rolebindings only named wavegate-waiter, not " + storageClasses},
	} {
		err := mgr.Create(ctx, tc.obj, client.DryRunAll)
		if tc.refused == "" {
			g.Expect(err).NotTo(HaveOccurred(), tc.name)
		} else {
			g.Expect(err).To(MatchError(ContainSubstring(tc.refused)), tc.name)
		}
	}
}

// TestManagerDeletesPodsOnlyInNamespacesBeingDeleted: the manager may delete pods (one that holds a
// later group's claim, in a namespace being deleted, would hold it for good), and the admission
// policy keeps it to opted-in namespaces being deleted.
func TestManagerDeletesPodsOnlyInNamespacesBeingDeleted(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	mgr := asManager(g)
	pod := func(ns string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "backup", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "backup"}}}}
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		return p
	}
	live, deleting, notOptedIn := pod(namespace(t, true)), pod(namespace(t, true)), pod(namespace(t, false))
	g.Eventually(func() error { return mgr.Delete(ctx, live) }).WithTimeout(10 * time.Second).
		Should(MatchError(ContainSubstring("may delete pods only in namespaces labeled wavegate.io/enabled=true that are being deleted, not in " + live.Namespace)))
	// envtest runs no namespace controller: a namespace stays Terminating, its pods with it.
	for _, p := range []*corev1.Pod{deleting, notOptedIn} {
		g.Expect(env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}})).To(Succeed())
	}
	g.Expect(mgr.Delete(ctx, notOptedIn)).To(MatchError(ContainSubstring("may delete pods only in namespaces labeled wavegate.io/enabled=true")))
	g.Expect(mgr.Delete(ctx, deleting)).To(Succeed())
}
