package sequence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/waiter"
)

// suspendedWaitJob is a wait Job of group web as the sequence controller creates it where the
// waiter's ServiceAccount does not exist yet: labeled, suspended, its waiter's arguments naming
// members.
func suspendedWaitJob(name, ns, seq string, created time.Time, members ...waiter.Member) *batchv1.Job {
	args := waiter.Args{Sequence: seq, Group: "web", Members: members}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{keys.WaitJobLabel: "true", keys.WaitSequenceLabel: seq},
			CreationTimestamp: metav1.NewTime(created)},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "wait", Args: args.Encode()}}}}},
	}
}

// reconcileAll runs the controller's passes as its queue runs them after a change: roles,
// bindings (for the roles that exist), then roles again (which resumes the Jobs whose bindings now
// exist). It returns their errors together.
func reconcileAll(r *RBACReconciler) error {
	var errs []error
	for _, key := range []string{rolesKey, bindingsKey, rolesKey} {
		_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: key}})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// webMember is the Deployment web of namespace ns, as a waiter's member.
func webMember(ns string) waiter.Member {
	return waiter.Member{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Namespace: ns, Name: "web"}
}

// TestWaitJobResumesAfterItsAccess: a wait Job is created suspended and the waiter-RBAC controller
// resumes it only after it has written the ServiceAccount, Role and RoleBinding its waiter needs:
// a pod started before would be refused (no ServiceAccount) or its waiter denied its first LISTs.
func TestWaitJobResumesAfterItsAccess(t *testing.T) {
	job := suspendedWaitJob("wavegate-wait-web-0123456789", "shop", "shop", time.Now(), webMember("shop"))
	var (
		mu    sync.Mutex
		calls []string
	)
	record := func(verb string, obj client.Object) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, fmt.Sprintf("%s %T %s", verb, obj, obj.GetName()))
	}
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(job).WithObjects(optedIn("shop")...).Build(), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			record("create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			record("patch", obj)
			return c.Patch(ctx, obj, p, opts...)
		},
	})
	r := &RBACReconciler{Client: c}
	if err := reconcileAll(r); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"create *v1.Role " + WaiterServiceAccount,
		"create *v1.RoleBinding " + WaiterServiceAccount,
		"create *v1.ServiceAccount " + WaiterServiceAccount,
		"patch *v1.Job " + job.Name,
	}
	// The binding is written after its Role (the API server checks the role a binding grants), and
	// the Job is resumed after all of it.
	if slices.Index(calls, want[1]) < slices.Index(calls, want[0]) {
		t.Errorf("the RoleBinding was created before its Role: %q", calls)
	}
	if len(calls) == len(want) {
		slices.Sort(calls[:len(calls)-1])
	}
	if d := cmp.Diff(want, calls); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
	got := &batchv1.Job{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(job), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Suspend == nil || *got.Spec.Suspend {
		t.Errorf("the wait Job is still suspended: %v", got.Spec.Suspend)
	}
	// More passes change nothing.
	calls = nil
	if err := reconcileAll(r); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 0 {
		t.Errorf("a second reconcile wrote %v", calls)
	}
}

// TestWaiterAccessInTheWayIsNamed: a RoleBinding named like the waiter's that wavegate did not make
// (no wavegate.io/waiter-rbac label, so the manager's cache never shows it) made every pass's
// create fail with AlreadyExists, which passed for "created a moment ago": nothing was reported,
// and the namespace's waiters never got their access. The pass now fails, naming the object and the
// fix, and the wait Job stays suspended.
func TestWaiterAccessInTheWayIsNamed(t *testing.T) {
	job := suspendedWaitJob("wavegate-wait-web-0123456789", "shop", "shop", time.Now(), webMember("shop"))
	squatter := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: WaiterServiceAccount, Namespace: "shop"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}}
	store := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(job, squatter).WithObjects(optedIn("shop")...).Build()
	// The manager's cache holds only what wavegate labels.
	cached := interceptor.NewClient(store, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if rb, ok := obj.(*rbacv1.RoleBinding); ok {
				live := &rbacv1.RoleBinding{}
				if err := c.Get(ctx, key, live, opts...); err != nil {
					return err
				}
				if live.Labels[keys.WaiterRBACLabel] != "true" {
					return apierrors.NewNotFound(schema.GroupResource{Group: rbacv1.GroupName, Resource: "rolebindings"}, key.Name)
				}
				live.DeepCopyInto(rb)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r := &RBACReconciler{Client: cached, APIReader: store}
	err := reconcileAll(r)
	if err == nil || !strings.Contains(err.Error(), "RoleBinding shop/wavegate-waiter exists without the label wavegate.io/waiter-rbac=true") {
		t.Fatalf("reconcile returned %v, want an error naming the RoleBinding in the way", err)
	}
	got := &batchv1.Job{}
	if err := store.Get(context.Background(), client.ObjectKeyFromObject(job), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Suspend == nil || !*got.Spec.Suspend {
		t.Error("the wait Job was resumed without its waiter's access")
	}
}

// TestWaitJobResumesAnywayWhenAccessFails: when the waiter's access cannot be provisioned, a wait
// Job is not held suspended for ever (its deadline would never run and its group never time out):
// after ResumeAnywayAfter it is resumed, and a Job created a moment ago stays suspended.
func TestWaitJobResumesAnywayWhenAccessFails(t *testing.T) {
	job := func(name string, created time.Time) *batchv1.Job {
		return suspendedWaitJob(name, "shop", "shop", created, webMember("shop"))
	}
	old, fresh := job("old", time.Now().Add(-2*ResumeAnywayAfter)), job("fresh", time.Now())
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(old, fresh).WithObjects(optedIn("shop")...).Build(), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*rbacv1.Role); ok {
				return apierrors.NewForbidden(schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "roles"}, obj.GetName(), fmt.Errorf("denied"))
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	r := &RBACReconciler{Client: c}
	if err := reconcileAll(r); err == nil {
		t.Fatal("Reconcile returned no error although the Role could not be created")
	}
	for _, tc := range []struct {
		job       *batchv1.Job
		suspended bool
	}{{old, false}, {fresh, true}} {
		got := &batchv1.Job{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(tc.job), got); err != nil {
			t.Fatal(err)
		}
		if s := got.Spec.Suspend != nil && *got.Spec.Suspend; s != tc.suspended {
			t.Errorf("Job %s suspended = %v, want %v", tc.job.Name, s, tc.suspended)
		}
	}
}

// TestWaitJobAccessIsPerNamespace: one tenant's namespace whose access cannot be written holds
// only its own wait Jobs: another namespace's Job resumes at once, and a namespace being deleted
// (nothing can be created there) is no error at all.
func TestWaitJobAccessIsPerNamespace(t *testing.T) {
	job := func(ns string) *batchv1.Job {
		return suspendedWaitJob("wavegate-wait-web-0123456789", ns, ns, time.Now(), webMember(ns))
	}
	refused, terminating, fine := job("refused"), job("terminating"), job("fine")
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(refused, terminating, fine).WithObjects(optedIn("refused", "terminating", "fine")...).Build(), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			switch obj.GetNamespace() {
			case "refused":
				if _, ok := obj.(*rbacv1.Role); ok {
					return apierrors.NewForbidden(schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "roles"}, obj.GetName(), fmt.Errorf("exceeded quota"))
				}
			case "terminating":
				return namespaceTerminating(schema.GroupResource{Resource: "serviceaccounts"}, obj)
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	r := &RBACReconciler{Client: c}
	err := reconcileAll(r)
	if err == nil || !apierrors.IsForbidden(err) {
		t.Fatalf("Reconcile returned %v, want the refused Role's error", err)
	}
	if strings.Contains(err.Error(), "being terminated") {
		t.Errorf("a namespace being deleted was reported: %v", err)
	}
	for _, tc := range []struct {
		job       *batchv1.Job
		suspended bool
	}{{refused, true}, {terminating, false}, {fine, false}} {
		got := &batchv1.Job{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(tc.job), got); err != nil {
			t.Fatal(err)
		}
		if s := got.Spec.Suspend != nil && *got.Spec.Suspend; s != tc.suspended {
			t.Errorf("Job in %s suspended = %v, want %v", tc.job.Namespace, s, tc.suspended)
		}
	}
}

// namespaceTerminating is the API server's refusal to create obj in a namespace being deleted (the
// NamespaceLifecycle admission plugin's).
func namespaceTerminating(gr schema.GroupResource, obj client.Object) error {
	err := apierrors.NewForbidden(gr, obj.GetName(),
		fmt.Errorf("unable to create new content in namespace %s because it is being terminated", obj.GetNamespace()))
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: corev1.NamespaceTerminatingCause, Message: "namespace " + obj.GetNamespace() + " is being terminated", Field: "metadata.namespace"})
	return err
}

// optedIn are namespaces labeled for wavegate.
func optedIn(names ...string) []client.Object {
	out := make([]client.Object, len(names))
	for i, n := range names {
		out[i] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{keys.EnabledLabel: "true"}}}
	}
	return out
}

type fixedPolicies struct{ idx *policy.Index }

func (f fixedPolicies) Index() *policy.Index { return f.idx }

// TestWaitJobAccessOnlyWhatItsSequenceMayHold: anyone who may create Jobs can create one labeled
// and shaped like a wait Job. Its waiter gets read access only to what its sequence may hold: not
// to another tenant's namespace, not cluster-wide to a namespaced kind, nothing for a Job outside
// an opted-in namespace or naming a sequence its namespace may not join; a shared sequence declared
// clusterScoped gets cluster-scoped kinds, for its Job in wavegate's namespace (see
// TestClusterWideAccessKeepsTenantsApart).
func TestWaitJobAccessOnlyWhatItsSequenceMayHold(t *testing.T) {
	gvr := func(group, resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: "v1", Resource: resource}
	}
	job := func(ns, seq string, ms ...waiter.Member) *batchv1.Job {
		return suspendedWaitJob("wavegate-wait-web-"+strings.ReplaceAll(seq, ".", "-"), ns, seq, time.Now(), ms...)
	}
	jobs := []client.Object{
		// Tenant a's own Job reaches into tenant b and cluster-wide.
		job("tenant-a", "tenant-a",
			waiter.Member{GVR: gvr("apps", "deployments"), Namespace: "tenant-a", Name: "web"},
			waiter.Member{GVR: gvr("", "configmaps"), Namespace: "tenant-b", Name: "x"},
			waiter.Member{GVR: gvr("", "configmaps"), Name: "x"},
			waiter.Member{GVR: gvr("rbac.authorization.k8s.io", "clusterroles"), Name: "x"}),
		// A Job naming tenant b's sequence, in tenant c; one in a namespace that is not opted in.
		job("tenant-c", "tenant-b", waiter.Member{GVR: gvr("", "configmaps"), Namespace: "tenant-b", Name: "x"}),
		job("outside", "outside", waiter.Member{GVR: gvr("", "configmaps"), Namespace: "outside", Name: "x"}),
		// A Job forged in tenant c for a sequence shared with tenant b, naming tenant b's objects
		// (its ConfigMaps, its wait Jobs) and kinds no waiter reads (Secrets, everything): wavegate
		// runs a group with members in another namespace in its own namespace, never in a tenant's.
		job("tenant-c", "shared",
			waiter.Member{GVR: gvr("apps", "deployments"), Namespace: "tenant-c", Name: "web"},
			waiter.Member{GVR: gvr("", "configmaps"), Namespace: "tenant-b", Name: "x"},
			waiter.Member{GVR: gvr("batch", "jobs"), Namespace: "tenant-b", Name: "x"},
			waiter.Member{GVR: gvr("", "secrets"), Namespace: "tenant-c", Name: "x"},
			waiter.Member{GVR: gvr("", "*"), Namespace: "tenant-c", Name: "x"}),
		// A shared sequence declared clusterScoped, its Job in wavegate's namespace.
		job("wavegate-system", "platform",
			waiter.Member{GVR: gvr("rbac.authorization.k8s.io", "clusterroles"), Name: "op"},
			waiter.Member{GVR: gvr("", "secrets"), Name: "op"}),
	}
	outside := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "outside"}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithRESTMapper(testrestmapper.TestOnlyStaticRESTMapper(scheme.Scheme)).WithObjects(jobs...).
		WithObjects(optedIn("tenant-a", "tenant-b", "tenant-c")...).WithObjects(outside).Build()
	idx := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: wavev1.WavePolicySpec{
		Sequences: []wavev1.SharedSequence{{Name: "platform", ClusterScoped: true},
			{Name: "shared", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{keys.EnabledLabel: "true"}}}}}}})
	r := &RBACReconciler{Client: c, Policies: fixedPolicies{idx}, Namespace: "wavegate-system"}
	if err := reconcileAll(r); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	var bindings rbacv1.RoleBindingList
	if err := c.List(context.Background(), &bindings); err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings.Items {
		for _, s := range b.Subjects {
			if s.Namespace != b.Namespace {
				got["bound from another namespace"] = append(got["bound from another namespace"], s.Namespace+" in "+b.Namespace)
			}
		}
	}
	granted := func(where string, rules []rbacv1.PolicyRule) {
		for _, rule := range rules {
			for _, res := range rule.Resources {
				if len(rule.ResourceNames) > 0 {
					res += fmt.Sprintf(" %v %v", rule.Verbs, rule.ResourceNames)
				}
				got[where] = append(got[where], res)
			}
		}
	}
	var roles rbacv1.RoleList
	if err := c.List(context.Background(), &roles); err != nil {
		t.Fatal(err)
	}
	for _, ro := range roles.Items {
		granted(ro.Namespace, ro.Rules)
	}
	var croles rbacv1.ClusterRoleList
	if err := c.List(context.Background(), &croles); err != nil {
		t.Fatal(err)
	}
	for _, ro := range croles.Items {
		granted("(cluster)", ro.Rules)
	}
	var sas corev1.ServiceAccountList
	if err := c.List(context.Background(), &sas); err != nil {
		t.Fatal(err)
	}
	for _, sa := range sas.Items {
		got["accounts"] = append(got["accounts"], sa.Namespace)
	}
	want := map[string][]string{
		// Each waiter may also mark its own Job ready, and no other.
		"tenant-a":        {"deployments", "jobs [patch] [wavegate-wait-web-tenant-a]"},
		"tenant-c":        {"deployments", "jobs [patch] [wavegate-wait-web-shared]"},
		"wavegate-system": {"jobs [patch] [wavegate-wait-web-platform]"},
		"(cluster)":       {"clusterroles"},
		// Every opted-in namespace has its waiter's ServiceAccount (and a Role without rules), ready
		// for its first wait Job; the namespace that is not opted in has none.
		"accounts": {"tenant-a", "tenant-b", "tenant-c", "wavegate-system"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("access granted (-want +got):\n%s", d)
	}
}

// TestWaiterAccessPreparedBeforeItsFirstJob: an opted-in namespace has its waiter's
// ServiceAccount, a Role without rules and its RoleBinding before any wait Job runs there, so that
// its first wait Job starts at once and needs one write (its Role's rules), not three. A namespace
// that is not opted in gets nothing, and one that opts out loses it.
func TestWaiterAccessPreparedBeforeItsFirstJob(t *testing.T) {
	outside := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "outside"}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(optedIn("shop")...).WithObjects(outside).Build()
	r := &RBACReconciler{Client: c, Namespace: "wavegate-system"}
	ctx := context.Background()
	if err := reconcileAll(r); err != nil {
		t.Fatal(err)
	}
	type found struct{ Accounts, Roles, Bindings []string }
	list := func() found {
		var f found
		var sas corev1.ServiceAccountList
		var roles rbacv1.RoleList
		var bindings rbacv1.RoleBindingList
		for _, l := range []client.ObjectList{&sas, &roles, &bindings} {
			if err := c.List(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		for _, sa := range sas.Items {
			f.Accounts = append(f.Accounts, sa.Namespace+"/"+sa.Name)
		}
		for _, ro := range roles.Items {
			f.Roles = append(f.Roles, fmt.Sprintf("%s/%s rules=%d", ro.Namespace, ro.Name, len(ro.Rules)))
		}
		for _, b := range bindings.Items {
			var subs []string
			for _, s := range b.Subjects {
				subs = append(subs, s.Namespace+"/"+s.Name)
			}
			f.Bindings = append(f.Bindings, fmt.Sprintf("%s/%s %s/%s -> %s", b.Namespace, b.Name, b.RoleRef.Kind, b.RoleRef.Name, strings.Join(subs, ",")))
		}
		return f
	}
	want := found{
		Accounts: []string{"shop/wavegate-waiter", "wavegate-system/wavegate-waiter"},
		Roles:    []string{"shop/wavegate-waiter rules=0"},
		Bindings: []string{"shop/wavegate-waiter Role/wavegate-waiter -> shop/wavegate-waiter"},
	}
	if d := cmp.Diff(want, list()); d != "" {
		t.Errorf("prepared access (-want +got):\n%s", d)
	}
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: "shop"}, ns); err != nil {
		t.Fatal(err)
	}
	delete(ns.Labels, keys.EnabledLabel)
	if err := c.Update(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := reconcileAll(r); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(found{Accounts: []string{"wavegate-system/wavegate-waiter"}}, list()); d != "" {
		t.Errorf("after opting out (-want +got):\n%s", d)
	}
}

// TestRulesWrittenWhileTheBindingIsInFlight: a namespace's first wait Job appears a moment after the
// namespace opts in, while its RoleBinding is being written (100-250 ms on a busy API server, which
// checks the role against the writer's own access). The pass that writes the Job's rules into the
// Role does not wait for that binding, and the Job resumes once both exist.
func TestRulesWrittenWhileTheBindingIsInFlight(t *testing.T) {
	job := suspendedWaitJob("wavegate-wait-web-0123456789", "shop", "shop", time.Now(), webMember("shop"))
	inFlight, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(optedIn("shop")...).Build(), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*rbacv1.RoleBinding); ok {
				once.Do(func() { close(inFlight) })
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Error("the Role's rules were not written while its RoleBinding was in flight")
				}
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	r := &RBACReconciler{Client: c}
	ctx := context.Background()
	pass := func(key string) error {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: key}})
		return err
	}
	// The namespace opts in: its ServiceAccount and Role, then its binding, which hangs.
	if err := pass(rolesKey); err != nil {
		t.Fatal(err)
	}
	bound := make(chan error)
	go func() { bound <- pass(bindingsKey) }()
	<-inFlight
	// The sequence controller creates the namespace's first wait Job.
	if err := c.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := pass(rolesKey); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: WaiterServiceAccount}, role); err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"patch"}, ResourceNames: []string{job.Name}}}
	if d := cmp.Diff(want, role.Rules); d != "" {
		t.Errorf("the Role's rules while its binding is in flight (-want +got):\n%s", d)
	}
	suspended := func() bool {
		got := &batchv1.Job{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(got.Spec.Suspend, false)
	}
	if !suspended() {
		t.Error("the wait Job was resumed before its RoleBinding existed")
	}
	close(done)
	if err := <-bound; err != nil {
		t.Fatal(err)
	}
	// The binding's creation brings the roles pass back, which resumes the Job.
	if err := pass(rolesKey); err != nil {
		t.Fatal(err)
	}
	if suspended() {
		t.Error("the wait Job is still suspended although its access exists")
	}
}

// clusterAccess is what the cluster-wide waiter access in c grants: per namespace, the kinds its
// waiter's ServiceAccount may list cluster-wide (through every ClusterRoleBinding to it and the
// ClusterRole it names, as the API server's authorizer would follow them), and the
// ClusterRoles and ClusterRoleBindings there are.
func clusterAccess(t *testing.T, c client.Client) (reads map[string][]string, objects []string) {
	t.Helper()
	ctx := context.Background()
	var roles rbacv1.ClusterRoleList
	var bindings rbacv1.ClusterRoleBindingList
	for _, l := range []client.ObjectList{&roles, &bindings} {
		if err := c.List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	rules := map[string][]rbacv1.PolicyRule{}
	for _, ro := range roles.Items {
		rules[ro.Name] = ro.Rules
		objects = append(objects, "ClusterRole/"+ro.Name)
	}
	reads = map[string][]string{}
	for _, b := range bindings.Items {
		objects = append(objects, "ClusterRoleBinding/"+b.Name)
		if b.RoleRef.Kind != "ClusterRole" {
			continue
		}
		for _, s := range b.Subjects {
			if s.Kind != rbacv1.ServiceAccountKind || s.Name != WaiterServiceAccount {
				continue
			}
			for _, rule := range rules[b.RoleRef.Name] {
				if slices.Contains(rule.Verbs, "list") {
					reads[s.Namespace] = append(reads[s.Namespace], rule.Resources...)
				}
			}
		}
	}
	for ns := range reads {
		slices.Sort(reads[ns])
		reads[ns] = slices.Compact(reads[ns])
	}
	slices.Sort(objects)
	return reads, objects
}

// TestClusterWideAccessKeepsTenantsApart: a group with a cluster-scoped member runs its wait Job in
// wavegate's own namespace, and only there does a waiter read cluster-scoped kinds; a tenant's
// waiter reads, cluster-wide, StorageClasses (for its claims) and nothing else. A tenant with a
// claim does not share the cluster-scoped kinds of a sequence declared clusterScoped, and a Job
// that a tenant owning such a sequence forges in its own namespace, naming any cluster-scoped
// kind, gets no cluster-wide access at all. Access written by an earlier version (one ClusterRole
// for both, bound to tenants) is narrowed, and what nothing needs is deleted.
func TestClusterWideAccessKeepsTenantsApart(t *testing.T) {
	gvr := func(group, resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: "v1", Resource: resource}
	}
	job := func(ns, seq string, ms ...waiter.Member) *batchv1.Job {
		return suspendedWaitJob("wavegate-wait-web-"+seq, ns, seq, time.Now(), ms...)
	}
	// The platform's sequence, its cluster-scoped member's group run in wavegate's namespace.
	platform := job("wavegate-system", "platform", waiter.Member{GVR: gvr("rbac.authorization.k8s.io", "clusterroles"), Name: "operator"})
	// A tenant's claim, its group run in its namespace.
	claim := job("tenant-a", "tenant-a", waiter.Member{GVR: gvr("", "persistentvolumeclaims"), Namespace: "tenant-a", Name: "data"})
	// Namespace widgets owns sequence widgets, declared clusterScoped: its tenant can create a Job
	// shaped like that sequence's wait Job, in its own namespace.
	forged := job("widgets", "widgets",
		waiter.Member{GVR: gvr("", "nodes"), Name: "node-0"},
		waiter.Member{GVR: gvr("rbac.authorization.k8s.io", "clusterrolebindings"), Name: "cluster-admin"},
		waiter.Member{GVR: gvr("certificates.k8s.io", "certificatesigningrequests"), Name: "csr"})
	managed := metav1.ObjectMeta{Name: WaiterServiceAccount, Labels: map[string]string{keys.WaiterRBACLabel: "true"}}
	read := func(group string, resources ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: []string{"get", "list", "watch"}}
	}
	waiters := func(namespaces ...string) []rbacv1.Subject {
		var out []rbacv1.Subject
		for _, ns := range namespaces {
			out = append(out, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: WaiterServiceAccount, Namespace: ns})
		}
		return out
	}
	// What an earlier version wrote: one ClusterRole for claims and cluster-scoped members, bound
	// to every namespace whose waiter needed either.
	earlier := []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: *managed.DeepCopy(), Rules: []rbacv1.PolicyRule{
			read("", "nodes"), read("rbac.authorization.k8s.io", "clusterroles"), read("storage.k8s.io", "storageclasses")}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: *managed.DeepCopy(), Subjects: waiters("tenant-a", "wavegate-system", "widgets"),
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: WaiterServiceAccount}},
	}
	storageClasses := metav1.ObjectMeta{Name: "wavegate-waiter-storageclasses", Labels: map[string]string{keys.WaiterRBACLabel: "true"}}
	split := []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: *managed.DeepCopy(), Rules: []rbacv1.PolicyRule{read("rbac.authorization.k8s.io", "clusterroles")}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: *managed.DeepCopy(), Subjects: waiters("wavegate-system"),
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: WaiterServiceAccount}},
		&rbacv1.ClusterRole{ObjectMeta: *storageClasses.DeepCopy(), Rules: []rbacv1.PolicyRule{read("storage.k8s.io", "storageclasses")}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: *storageClasses.DeepCopy(), Subjects: waiters("tenant-a"),
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: storageClasses.Name}},
	}
	both := []string{
		"ClusterRole/wavegate-waiter", "ClusterRole/wavegate-waiter-storageclasses",
		"ClusterRoleBinding/wavegate-waiter", "ClusterRoleBinding/wavegate-waiter-storageclasses",
	}
	for _, tc := range []struct {
		name        string
		objs        []client.Object
		wantReads   map[string][]string
		wantObjects []string
	}{{
		name:        "a claim's waiter does not read the kinds of a sequence declared clusterScoped",
		objs:        []client.Object{platform, claim},
		wantReads:   map[string][]string{"tenant-a": {"storageclasses"}, "wavegate-system": {"clusterroles"}},
		wantObjects: both,
	}, {
		name:      "a Job forged in a tenant's namespace names cluster-scoped kinds of its clusterScoped sequence",
		objs:      []client.Object{forged, claim},
		wantReads: map[string][]string{"tenant-a": {"storageclasses"}},
		wantObjects: []string{
			"ClusterRole/wavegate-waiter-storageclasses", "ClusterRoleBinding/wavegate-waiter-storageclasses",
		},
	}, {
		name:        "the access of an earlier version is split",
		objs:        append([]client.Object{platform, claim, forged}, earlier...),
		wantReads:   map[string][]string{"tenant-a": {"storageclasses"}, "wavegate-system": {"clusterroles"}},
		wantObjects: both,
	}, {
		name:        "no claim left: the tenants' cluster-wide access is deleted",
		objs:        append([]client.Object{platform}, split...),
		wantReads:   map[string][]string{"wavegate-system": {"clusterroles"}},
		wantObjects: []string{"ClusterRole/wavegate-waiter", "ClusterRoleBinding/wavegate-waiter"},
	}, {
		name:      "no wait Job left: all of it is deleted",
		objs:      split,
		wantReads: map[string][]string{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithRESTMapper(testrestmapper.TestOnlyStaticRESTMapper(scheme.Scheme)).
				WithObjects(tc.objs...).WithObjects(optedIn("tenant-a", "widgets")...).Build()
			idx := policy.Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: wavev1.WavePolicySpec{
				Sequences: []wavev1.SharedSequence{{Name: "platform", ClusterScoped: true}, {Name: "widgets", ClusterScoped: true}}}}})
			r := &RBACReconciler{Client: c, Policies: fixedPolicies{idx}, Namespace: "wavegate-system"}
			if err := reconcileAll(r); err != nil {
				t.Fatal(err)
			}
			reads, objects := clusterAccess(t, c)
			if d := cmp.Diff(tc.wantReads, reads); d != "" {
				t.Errorf("what each namespace's waiter may read cluster-wide (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantObjects, objects); d != "" {
				t.Errorf("cluster-wide waiter access (-want +got):\n%s", d)
			}
		})
	}
}
