package teardown_test

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/teardown"
	"wavegate.io/wavegate/test/framework"
)

// TestPermissionsAreClusterWide, against a real API server: admission adds the teardown finalizer
// to objects in every namespace, so only what the manager may patch everywhere counts. A Role in
// wavegate's own namespace (where the review used to be asked) grants nothing elsewhere: counting it
// put finalizers on objects the manager could not patch, and their deletion never finished.
func TestPermissionsAreClusterWide(t *testing.T) {
	env, err := framework.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	c := env.Client // framework.Start creates wavegate's namespace
	const user = "permissions-test"
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}}
	objs := []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "local", Namespace: "wavegate-system"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "local", Namespace: "wavegate-system"}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "local"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "permissions-test"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"patch"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "permissions-test"}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "permissions-test"}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	p := &teardown.Permissions{Client: kubernetes.NewForConfigOrDie(cfg)}
	// The API server's authorizer sees new bindings through its own informers, a moment later (on
	// a busy machine, after the first review).
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := p.Refresh(ctx); err != nil {
			return false, err
		}
		return p.CanPatch("apps", "deployments"), nil
	}); err != nil {
		t.Fatalf("a ClusterRole's grant did not count: %v", err)
	}
	if p.CanPatch("", "configmaps") {
		t.Error("a Role in one namespace counted as a grant in every namespace")
	}
}
