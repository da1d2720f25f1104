package sequence

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/patch"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/waiter"
)

// The waiters' access has one name everywhere (WaiterServiceAccount), but for the cluster-wide
// read of StorageClasses (WaiterStorageClassesRole): what the manager changes or deletes is limited
// to them (creating cannot be limited by name).
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=serviceaccounts,resourceNames=wavegate-waiter,verbs=patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings;clusterroles;clusterrolebindings,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,resourceNames=wavegate-waiter,verbs=patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings,resourceNames=wavegate-waiter;wavegate-waiter-storageclasses,verbs=patch;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch
//
// A write of a role's rules, or of a binding, is checked by the API server against the writer's own
// rules, with consistent reads of every binding that applies to it: while a namespace's app is
// admitted (a hundred pods), its first waiter's rules and binding took 200-300 ms each to land on the
// local cluster, after that waiter's group was ready. escalate and bind on the Roles named
// wavegate-waiter (not ClusterRoles) skip that check for the waiters' Roles: an update of one (its
// name is in the request; a creation names none and is still checked) and a RoleBinding to one. What
// such a Role may hold is bounded instead by config/rbac's manager-writes admission policy: read only,
// no subresources, never Secrets, and patch on wait Jobs by name, in opted-in namespaces and
// wavegate's own; roles and bindings the manager did not make keep their rules and subjects.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles,resourceNames=wavegate-waiter,verbs=bind;escalate

// RBACReconciler provisions least-privilege access for wait Jobs: in every namespace that runs
// wait Jobs a ServiceAccount; in every namespace whose objects they watch a Role allowing
// get/list/watch on exactly those kinds, bound to the ServiceAccounts that need it; and two
// ClusterRoles. One (clusterMembers) reads the kinds of cluster-scoped members, for the waiter of
// wavegate's own namespace alone: a group with a cluster-scoped member runs its wait Job there
// (jobNamespace). The other (storageClasses) reads StorageClasses, for the waiters of claims,
// which a claim's readiness depends on: the one cluster-wide read a tenant's waiter gets. Every
// opted-in namespace has its ServiceAccount and its Role (without rules while no wait Job needs
// any) and RoleBinding before its first wait Job. The rest is derived from the wait Jobs
// themselves, and a tenant can create a Job that looks like one: so a Job is provisioned only in
// wavegate's own namespace or in an opted-in namespace that may join the Job's sequence, and only
// for members that the sequence may hold (an opted-in namespace that may join it; a cluster-scoped
// kind, for a shared sequence declared clusterScoped, and only to a Job in wavegate's own
// namespace, where no tenant creates Jobs). Nothing a tenant writes grants access to another
// namespace, or cluster-wide but to StorageClasses.
type RBACReconciler struct {
	Client client.Client
	// Policies declare the shared sequences (nil: every sequence is its namespace's own).
	Policies interface{ Index() *policy.Index }
	// Namespace is wavegate's own, where the wait Jobs of sequences with only cluster-scoped
	// members run.
	Namespace string
	// APIReader reads what the cache does not hold (it holds only what wavegate labels): an object
	// of the waiter's name that someone else made. Nil trusts the cache.
	APIReader client.Reader
}

// The controller's two keys. A pass of rolesKey writes the ServiceAccounts and roles, resumes the
// wait Jobs whose access is complete and prunes what nothing needs; a pass of bindingsKey writes
// the bindings. Each is derived from the whole set, and they run side by side: on a busy API server
// a binding's write, like a role's whose rules change, takes 100-250 ms (the API server checks that
// the writer holds what the role grants, with consistent reads of every binding). A namespace that
// opts in with its app (one kubectl apply) then has its first waiter's rules written while its
// binding is in flight, instead of a pass after it.
const (
	rolesKey    = "waiters"
	bindingsKey = "waiter-bindings"
)

// SetupWithManager registers the controller: every change enqueues both keys.
func (r *RBACReconciler) SetupWithManager(mgr ctrl.Manager) error {
	both := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: rolesKey}}, {NamespacedName: client.ObjectKey{Name: bindingsKey}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("waiter-rbac").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Watches(&batchv1.Job{}, both).
		Watches(&rbacv1.Role{}, both).
		Watches(&rbacv1.RoleBinding{}, both).
		Watches(&corev1.ServiceAccount{}, both).
		// A namespace that opts in (or out) gets (or loses) its waiter's ServiceAccount and Role.
		Watches(&corev1.Namespace{}, both, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&rbacv1.ClusterRole{}, both).
		Watches(&rbacv1.ClusterRoleBinding{}, both).
		Complete(r)
}

// A waiter role is named by its key, which its binding shares: a namespace's Role (roleKey, also
// the key of that namespace's ServiceAccount), or one of the two ClusterRoles.
var (
	// clusterMembers reads the kinds of cluster-scoped members, bound only to the waiter of
	// wavegate's own namespace.
	clusterMembers = client.ObjectKey{Name: WaiterServiceAccount}
	// storageClasses reads StorageClasses, bound to the waiters of claims.
	storageClasses = client.ObjectKey{Name: WaiterStorageClassesRole}
)

// storageClassesResource is what storageClasses grants: a claim's readiness depends on its
// StorageClass's binding mode (WaitForFirstConsumer).
const storageClassesResource = "storage.k8s.io/storageclasses"

// roleKey is the key of namespace ns's waiter Role, RoleBinding and ServiceAccount.
func roleKey(ns string) client.ObjectKey {
	return client.ObjectKey{Namespace: ns, Name: WaiterServiceAccount}
}

type access struct {
	rules    map[client.ObjectKey]map[string]bool // role -> "group/resource" it reads
	subjects map[client.ObjectKey]map[string]bool // role -> namespaces whose waiter it is bound to
	accounts map[string]bool
	// jobs are, per namespace, the wait Jobs there, which their waiters mark ready
	// (keys.WaiterReadyAnnotation): patch on exactly those names.
	jobs map[string][]string
}

// grant binds role to the waiter of namespace jobNS and, unless gr is "", lets it read gr
// ("group/resource").
func (a access) grant(role client.ObjectKey, gr, jobNS string) {
	if a.rules[role] == nil {
		a.rules[role], a.subjects[role] = map[string]bool{}, map[string]bool{}
	}
	if gr != "" {
		a.rules[role][gr] = true
	}
	a.subjects[role][jobNS] = true
}

// Reconcile implements reconcile.Reconciler.
func (r *RBACReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var idx *policy.Index
	if r.Policies != nil {
		if idx = r.Policies.Index(); idx == nil {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
	}
	sc := newScope(r.Client, r.Namespace)
	d, err := r.desired(ctx, idx, sc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if req.Name == bindingsKey {
		return ctrl.Result{}, r.bind(ctx, d.want)
	}
	// Each namespace is provisioned on its own, and a wait Job resumes once the namespaces it needs
	// are: a namespace whose access cannot be written (one being deleted, a quota) holds no other
	// tenant's waiters.
	failed, gone := r.writeRoles(ctx, d.want)
	provisioned := func(j *batchv1.Job) bool {
		return !slices.ContainsFunc(d.needs[j], func(role client.ObjectKey) bool {
			if gone[role] {
				return false // being deleted, and its wait Jobs with it: nothing to wait for
			}
			_, wanted := d.want.rules[role]
			return failed[role] != nil || wanted && !r.bound(ctx, role, j.Namespace)
		})
	}
	applyErr := errors.Join(slices.Collect(maps.Values(failed))...)
	again, err := r.resume(ctx, d.jobs, provisioned)
	if err != nil {
		return ctrl.Result{}, errors.Join(applyErr, err)
	}
	if applyErr != nil {
		// Retried with back-off; resume starts held Jobs after ResumeAnywayAfter. What nothing needs
		// is pruned all the same: one namespace's failure (an object in the way that wavegate did not
		// make, which only its owner can remove) must not keep every other namespace's leftovers.
		return ctrl.Result{}, errors.Join(applyErr, r.prune(ctx, d.want))
	}
	return ctrl.Result{RequeueAfter: again}, r.prune(ctx, d.want)
}

// desiredAccess is the waiters' access that the wait Jobs and opted-in namespaces call for.
type desiredAccess struct {
	want access
	// jobs are wavegate's wait Jobs, and needs, per Job, the roles (keys) its waiter uses: its own
	// namespace's (with the ServiceAccount), those of its members' namespaces, and the
	// ClusterRoles its members call for.
	jobs  []*batchv1.Job
	needs map[*batchv1.Job][]client.ObjectKey
}

// desired derives the access from the cache.
func (r *RBACReconciler) desired(ctx context.Context, idx *policy.Index, sc *scope) (*desiredAccess, error) {
	var jobs batchv1.JobList
	if err := r.Client.List(ctx, &jobs, client.MatchingLabels{keys.WaitJobLabel: "true"}); err != nil {
		return nil, err
	}
	want := access{rules: map[client.ObjectKey]map[string]bool{}, subjects: map[client.ObjectKey]map[string]bool{},
		accounts: map[string]bool{}, jobs: map[string][]string{}}
	d := &desiredAccess{want: want, needs: map[*batchv1.Job][]client.ObjectKey{}}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if j.DeletionTimestamp != nil || len(j.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		args, err := waiter.ParseArgs(j.Spec.Template.Spec.Containers[0].Args)
		if err != nil || !r.mayRun(ctx, idx, sc, j, args.Sequence) {
			continue // not a wait Job wavegate made
		}
		want.accounts[j.Namespace] = true
		d.jobs = append(d.jobs, j)
		d.needs[j] = append(d.needs[j], roleKey(j.Namespace))
		want.grant(roleKey(j.Namespace), "", j.Namespace)
		want.jobs[j.Namespace] = append(want.jobs[j.Namespace], j.Name)
		for _, m := range args.Members {
			if !r.mayWatch(ctx, idx, sc, j, args.Sequence, m) {
				ctrl.LoggerFrom(ctx).Info("Not granting a wait Job access to a member its sequence may not hold, or not from the Job's namespace",
					"job", klog.KObj(j), "sequence", args.Sequence, "member", m.GVR.Resource+" "+m.Namespace+"/"+m.Name)
				continue
			}
			role := roleKey(m.Namespace)
			if m.Namespace == "" {
				role = clusterMembers
			}
			d.needs[j] = append(d.needs[j], role)
			want.grant(role, m.GVR.Group+"/"+m.GVR.Resource, j.Namespace)
			if m.GVR.Group == "" && m.GVR.Resource == "persistentvolumeclaims" {
				d.needs[j] = append(d.needs[j], storageClasses)
				want.grant(storageClasses, storageClassesResource, j.Namespace)
			}
		}
	}
	// Every opted-in namespace gets its waiter's ServiceAccount, and a Role bound to it, before any
	// wait Job runs there: the Role has no rules until a wait Job needs some, and then one write
	// adds them. A namespace's first wait Job then starts at once (its pod needs only the
	// ServiceAccount) while its Role is completed, instead of after three writes on an API server
	// that is admitting the namespace's first pods.
	if err := r.prepareOptedIn(ctx, sc, want); err != nil {
		return nil, err
	}
	if r.Namespace != "" {
		want.accounts[r.Namespace] = true
	}
	return d, nil
}

// prepareOptedIn adds to want, for every opted-in namespace that is not being deleted, the
// waiter's ServiceAccount and a Role (without rules unless a wait Job needs some) bound to it.
func (r *RBACReconciler) prepareOptedIn(ctx context.Context, sc *scope, want access) error {
	var namespaces corev1.NamespaceList
	if err := r.Client.List(ctx, &namespaces, client.MatchingLabels{keys.EnabledLabel: "true"}); err != nil {
		return fmt.Errorf("listing opted-in namespaces: %w", err)
	}
	for i := range namespaces.Items {
		ns := &namespaces.Items[i]
		if ns.DeletionTimestamp != nil || !sc.OptedIn(ctx, ns.Name) {
			continue
		}
		want.accounts[ns.Name] = true
		want.grant(roleKey(ns.Name), "", ns.Name)
	}
	return nil
}

// mayRun reports whether a wait Job of sequence seq may get its access: in wavegate's own
// namespace, or in an opted-in namespace that may join the sequence, with the sequence label
// wavegate puts on its Jobs.
func (r *RBACReconciler) mayRun(ctx context.Context, idx *policy.Index, sc *scope, j *batchv1.Job, seq string) bool {
	if seq == "" || j.Labels[keys.WaitSequenceLabel] != seq {
		return false
	}
	if r.Namespace != "" && j.Namespace == r.Namespace {
		return true
	}
	return sc.OptedIn(ctx, j.Namespace) && idx.MayJoin(seq, j.Namespace, sc.Labels(ctx, j.Namespace))
}

// mayWatch reports whether the waiter of wait Job j, of sequence seq, may read member m: a
// namespaced member in an opted-in namespace that may join the sequence, and that is j's own
// namespace unless j runs in wavegate's; a cluster-scoped one (a kind the API server says is
// cluster-scoped) if the sequence is shared with clusterScoped and j runs in wavegate's own
// namespace. wavegate runs there every group with a cluster-scoped member or members in several
// namespaces (jobNamespace), and no tenant creates Jobs there: a Job shaped like a wait Job that a
// tenant creates in its own namespace reads nothing of another namespace's (its ConfigMaps, its
// wait Jobs, which the Role of that namespace lets its waiter mark) even in a sequence shared with
// it, and no cluster-scoped kind. Nor does any waiter read a kind that is never a member (Secrets,
// pods; see members.Skipped) or a wildcard: a Role asking for Secrets would have every write of
// that namespace's Role refused by the manager-writes policy, and its real wait Jobs stall.
func (r *RBACReconciler) mayWatch(ctx context.Context, idx *policy.Index, sc *scope, j *batchv1.Job, seq string, m waiter.Member) bool {
	if members.Skipped(m.GVR.GroupResource()) || strings.Contains(m.GVR.Group+"/"+m.GVR.Resource, "*") {
		return false
	}
	ownNamespace := r.Namespace != "" && j.Namespace == r.Namespace
	if m.Namespace != "" {
		return (m.Namespace == j.Namespace || ownNamespace) &&
			sc.OptedIn(ctx, m.Namespace) && idx.MayJoin(seq, m.Namespace, sc.Labels(ctx, m.Namespace))
	}
	if !ownNamespace || !idx.MayJoin(seq, "", nil) {
		return false
	}
	gvk, err := r.Client.RESTMapper().KindFor(m.GVR)
	if err != nil {
		return false
	}
	mapping, err := r.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	return err == nil && mapping.Scope.Name() == meta.RESTScopeNameRoot
}

// ResumeAnywayAfter is how long a wait Job stays suspended when its access cannot be provisioned:
// a suspended Job's deadline does not run, so holding it longer would keep its group from ever
// timing out. Resumed, its waiter fails or times out as the group's policy says.
const ResumeAnywayAfter = 30 * time.Second

// resume starts the wait Jobs that were created suspended (see createJob): all of them once their
// access exists, and those suspended for ResumeAnywayAfter when it does not. A Job's deadline, if
// armed, counts from its start (the Job controller resets startTime when a Job resumes). It
// returns when to come back for a Job it left suspended (zero: none).
func (r *RBACReconciler) resume(ctx context.Context, jobs []*batchv1.Job, provisionedFor func(*batchv1.Job) bool) (time.Duration, error) {
	var again time.Duration
	for _, j := range jobs {
		if j.Spec.Suspend == nil || !*j.Spec.Suspend {
			continue
		}
		provisioned := provisionedFor(j)
		if wait := ResumeAnywayAfter - time.Since(j.CreationTimestamp.Time); !provisioned && wait > 0 {
			if again == 0 || wait < again {
				again = wait
			}
			continue
		}
		if _, err := patchJSON(ctx, r.Client, j, patch.Add("/spec/suspend", false)); err != nil {
			return 0, fmt.Errorf("resuming wait Job %s: %w", klog.KObj(j), err)
		}
		if provisioned {
			ctrl.LoggerFrom(ctx).V(1).Info("Resumed wait Job: its waiter's access exists", "job", klog.KObj(j))
		} else {
			ctrl.LoggerFrom(ctx).Info("Resumed wait Job although its waiter's access could not be provisioned", "job", klog.KObj(j), "after", ResumeAnywayAfter)
		}
	}
	return again, nil
}

func managedLabels() map[string]string {
	return map[string]string{keys.WaiterRBACLabel: "true", keys.ManagedByLabel: "wavegate"}
}

func policyRules(resources map[string]bool, jobs []string) []rbacv1.PolicyRule {
	if len(resources) == 0 && len(jobs) == 0 {
		return nil // as the API server returns an empty list: no patch on every pass
	}
	byGroup := map[string][]string{}
	for gr := range resources {
		g, res, _ := strings.Cut(gr, "/")
		byGroup[g] = append(byGroup[g], res)
	}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	out := make([]rbacv1.PolicyRule, 0, len(groups))
	for _, g := range groups {
		res := byGroup[g]
		sort.Strings(res)
		out = append(out, rbacv1.PolicyRule{APIGroups: []string{g}, Resources: res, Verbs: []string{"get", "list", "watch"}})
	}
	if len(jobs) > 0 {
		names := slices.Sorted(slices.Values(jobs))
		out = append(out, rbacv1.PolicyRule{APIGroups: []string{batchv1.GroupName}, Resources: []string{"jobs"}, Verbs: []string{"patch"}, ResourceNames: names})
	}
	return out
}

func subjects(namespaces map[string]bool) []rbacv1.Subject {
	ns := make([]string, 0, len(namespaces))
	for n := range namespaces {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	out := make([]rbacv1.Subject, 0, len(ns))
	for _, n := range ns {
		out = append(out, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: WaiterServiceAccount, Namespace: n})
	}
	return out
}

// writeRoles writes the ServiceAccounts and roles want describes, side by side, and returns, by
// role (a namespace's, with its ServiceAccount, or a ClusterRole), what it could not write and
// which namespaces' are being deleted (nothing can be created there, and nothing needs to be).
func (r *RBACReconciler) writeRoles(ctx context.Context, want access) (failed map[client.ObjectKey]error, gone map[client.ObjectKey]bool) {
	w := newWrites(ctx)
	for ns := range want.accounts {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: WaiterServiceAccount, Namespace: ns}}
		w.upsert(r, roleKey(ns), sa, func() { sa.Labels = managedLabels() })
	}
	for key, res := range want.rules {
		if key.Namespace == "" {
			rules := policyRules(res, nil)
			cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}
			w.upsert(r, key, cr, func() { cr.Labels, cr.Rules = managedLabels(), rules })
			continue
		}
		rules := policyRules(res, want.jobs[key.Namespace])
		ro := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
		w.upsert(r, key, ro, func() { ro.Labels, ro.Rules = managedLabels(), rules })
	}
	return w.wait()
}

// bind writes the bindings want describes, side by side, for the roles the cache has (the API
// server checks a binding's role, which must exist; its creation brings this pass back).
func (r *RBACReconciler) bind(ctx context.Context, want access) error {
	w := newWrites(ctx)
	for key := range want.rules {
		subs := subjects(want.subjects[key])
		roleRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: key.Name}
		if key.Namespace == "" {
			if !r.cached(ctx, &rbacv1.ClusterRole{}, key) {
				continue
			}
			roleRef.Kind = "ClusterRole"
			crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}
			w.upsert(r, key, crb, func() { crb.Labels, crb.RoleRef, crb.Subjects = managedLabels(), roleRef, subs })
			continue
		}
		if !r.cached(ctx, &rbacv1.Role{}, key) {
			continue
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
		w.upsert(r, key, rb, func() { rb.Labels, rb.RoleRef, rb.Subjects = managedLabels(), roleRef, subs })
	}
	failed, _ := w.wait()
	return errors.Join(slices.Collect(maps.Values(failed))...)
}

func (r *RBACReconciler) cached(ctx context.Context, obj client.Object, key client.ObjectKey) bool {
	return r.Client.Get(ctx, key, obj) == nil && obj.GetDeletionTimestamp() == nil
}

// bound reports whether the cache shows the binding of a waiter role (its key: a namespace's
// Role, or a ClusterRole) granting it to the ServiceAccount of namespace jobNS.
func (r *RBACReconciler) bound(ctx context.Context, role client.ObjectKey, jobNS string) bool {
	var ref rbacv1.RoleRef
	var subs []rbacv1.Subject
	if role.Namespace == "" {
		crb := &rbacv1.ClusterRoleBinding{}
		if !r.cached(ctx, crb, role) {
			return false
		}
		ref, subs = crb.RoleRef, crb.Subjects
	} else {
		rb := &rbacv1.RoleBinding{}
		if !r.cached(ctx, rb, role) {
			return false
		}
		ref, subs = rb.RoleRef, rb.Subjects
	}
	return ref.Name == role.Name && slices.Contains(subs,
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: WaiterServiceAccount, Namespace: jobNS})
}

// writes runs upserts side by side and collects their outcome by role (key).
type writes struct {
	ctx    context.Context
	wg     sync.WaitGroup
	mu     sync.Mutex
	failed map[client.ObjectKey]error
	gone   map[client.ObjectKey]bool
}

func newWrites(ctx context.Context) *writes {
	return &writes{ctx: ctx, failed: map[client.ObjectKey]error{}, gone: map[client.ObjectKey]bool{}}
}

func (w *writes) upsert(r *RBACReconciler, role client.ObjectKey, obj client.Object, mutate func()) {
	w.wg.Go(func() {
		gone, err := r.upsert(w.ctx, obj, mutate)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.failed[role] = errors.Join(w.failed[role], err)
		}
		if gone {
			w.gone[role] = true
		}
	})
}

func (w *writes) wait() (map[client.ObjectKey]error, map[client.ObjectKey]bool) {
	w.wg.Wait()
	return w.failed, w.gone
}

// upsert creates or patches obj; gone reports that its namespace is being deleted.
func (r *RBACReconciler) upsert(ctx context.Context, obj client.Object, mutate func()) (gone bool, err error) {
	before := obj.DeepCopyObject()
	res, err := controllerutil.CreateOrPatch(ctx, r.Client, obj, func() error { mutate(); return nil })
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return true, nil // the namespace is being deleted, and its wait Jobs with it: nothing to provision
	}
	if apierrors.IsAlreadyExists(err) {
		// Created a moment ago (the cache has not shown it yet): its creation brings the pass
		// back, which patches it if need be. Unless someone else made it: the cache holds only
		// what wavegate labels, so it would never show it, and the waiters of the namespace would
		// wait for access that never comes.
		return false, r.madeByOthers(ctx, obj)
	}
	if err != nil {
		return false, fmt.Errorf("provisioning waiter access %T %s: %w", obj, klog.KObj(obj), err)
	}
	if res != controllerutil.OperationResultNone && !equality.Semantic.DeepEqual(before, obj) {
		ctrl.LoggerFrom(ctx).V(1).Info("Provisioned waiter access", "object", klog.KObj(obj), "result", res)
	}
	return false, nil
}

// madeByOthers returns an error naming the object in the way when an object of obj's name exists
// without wavegate's label.
func (r *RBACReconciler) madeByOthers(ctx context.Context, obj client.Object) error {
	if r.APIReader == nil {
		return nil
	}
	live, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return nil
	}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		return client.IgnoreNotFound(err)
	}
	if live.GetLabels()[keys.WaiterRBACLabel] == "true" {
		return nil
	}
	return fmt.Errorf("provisioning waiter access: %T %s exists without the label %s=true, so wavegate did not make it and will not change it; "+
		"the wait Jobs of namespace %s cannot get their access until it is deleted (wavegate makes and owns the waiters' ServiceAccount, Role and RoleBinding named %s)",
		obj, klog.KObj(obj), keys.WaiterRBACLabel, obj.GetNamespace(), obj.GetName())
}

// prune deletes provisioned objects nothing needs any more.
func (r *RBACReconciler) prune(ctx context.Context, want access) error {
	sel := client.MatchingLabels{keys.WaiterRBACLabel: "true"}
	var sas corev1.ServiceAccountList
	var roles rbacv1.RoleList
	var bindings rbacv1.RoleBindingList
	var clusterRoles rbacv1.ClusterRoleList
	var clusterBindings rbacv1.ClusterRoleBindingList
	for _, l := range []client.ObjectList{&sas, &roles, &bindings, &clusterRoles, &clusterBindings} {
		if err := r.Client.List(ctx, l, sel); err != nil {
			return err
		}
	}
	var stale []client.Object
	for i := range sas.Items {
		if !want.accounts[sas.Items[i].Namespace] {
			stale = append(stale, &sas.Items[i])
		}
	}
	// A role and its binding share their key. Only what the cache shows is deleted: a blind DELETE
	// of the cluster-wide objects would cost requests on every reconcile of a cluster that never
	// needed them.
	unwanted := func(o client.Object) bool {
		_, ok := want.rules[client.ObjectKeyFromObject(o)]
		return !ok
	}
	for i := range roles.Items {
		if unwanted(&roles.Items[i]) {
			stale = append(stale, &roles.Items[i])
		}
	}
	for i := range bindings.Items {
		if unwanted(&bindings.Items[i]) {
			stale = append(stale, &bindings.Items[i])
		}
	}
	for i := range clusterRoles.Items {
		if unwanted(&clusterRoles.Items[i]) {
			stale = append(stale, &clusterRoles.Items[i])
		}
	}
	for i := range clusterBindings.Items {
		if unwanted(&clusterBindings.Items[i]) {
			stale = append(stale, &clusterBindings.Items[i])
		}
	}
	for _, o := range stale {
		if o.GetName() != WaiterServiceAccount && (o.GetNamespace() != "" || o.GetName() != WaiterStorageClassesRole) {
			continue // the label on something wavegate did not create: not its to delete
		}
		if err := r.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting unneeded waiter access %s: %w", klog.KObj(o), err)
		}
	}
	return nil
}
