package ordering

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
)

type app struct {
	ns      string
	db      *appsv1.StatefulSet
	migrate *batchJob
	web     *appsv1.Deployment
	dbPod   *corev1.Pod
	migPod  *corev1.Pod
	webPod  *corev1.Pod
}

type (
	batchJob    = batchv1.Job
	batchv1JobT = batchv1.Job
	rbacRole    = rbacv1.Role
)

// installApp applies a three-group app at once, as `kubectl apply -f dir/` does, with the web
// group first to show that apply order does not matter, and creates one pod per workload.
func installApp(t *testing.T) *app {
	g := NewWithT(t)
	ctx := context.Background()
	a := &app{ns: namespace(t)}
	a.web = deployment(a.ns, "web", member("web", 3))
	a.migrate = job(a.ns, "migrate", member("migrate", 2))
	a.db = statefulSet(a.ns, "db", member("database", 1))
	for _, o := range []client.Object{a.web, a.migrate, a.db} {
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
	}
	a.webPod = podOf(t, a.web, a.web.Spec.Template, "pod-template-hash", "v1")
	a.migPod = podOf(t, a.migrate, a.migrate.Spec.Template, "batch.kubernetes.io/controller-uid", string(uid(a.migrate)))
	a.dbPod = podOf(t, a.db, a.db.Spec.Template, "controller-revision-hash", "db-1")
	return a
}

func TestInstallOrder(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := installApp(t)

	// Every member pod is gated at admission; the first group is released at once.
	expectGated(t, a.webPod, a.migPod)
	eventuallyUngated(t, a.dbPod)
	expectGated(t, a.webPod, a.migPod)

	// The database's wait Job waits; the migration and web stay gated.
	g.Eventually(groupPhase(a.ns, "database")).WithTimeout(timeout).Should(Equal(wavev1.GroupWaiting))
	g.Eventually(func(g Gomega) string { return sequenceStatus(g, a.ns).Status.Summary }).WithTimeout(timeout).
		Should(Equal("database 0/1 Waiting, migrate 0/1 Pending, web 0/1 Pending"))
	seq := sequenceStatus(g, a.ns)
	dbJob := seq.Status.Groups[0].WaitJob
	g.Expect(dbJob).NotTo(BeEmpty())
	ns, name, _ := strings.Cut(dbJob, "/")
	g.Eventually(func() string { return runner.Log(ns, name) }).WithTimeout(timeout).
		Should(ContainSubstring("statefulsets.apps/" + a.ns + "/db:"))

	// A workload that waits says why: for the group right before its own, not the first one.
	g.Eventually(func(g Gomega) []string {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs, client.InNamespace(a.ns))).To(Succeed())
		var notes []string
		for _, e := range evs.Items {
			if e.Regarding.Name == "web" && e.Reason == sequence.ReasonWaitingForGroup {
				notes = append(notes, e.Note)
			}
		}
		return notes
	}).WithTimeout(timeout).Should(ContainElement("group web waits for group migrate: 0/1 members ready"))

	markStatefulSetReady(t, a.db)
	g.Eventually(func() string { return runner.Log(ns, name) }).WithTimeout(timeout).Should(ContainSubstring(`group "database" is ready`))
	eventuallyUngated(t, a.migPod)
	expectGated(t, a.webPod)
	released := &corev1.Pod{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(a.migPod), released)).To(Succeed())
	// The gate's removal sets no field: the pod has no managedFields entry of wavegate's, which every
	// later write of the pod would have to convert.
	for _, m := range released.ManagedFields {
		g.Expect(m.Manager).NotTo(Equal(keys.FieldManager), "wavegate owns fields of the released pod: %s", m.FieldsV1)
	}

	// A started migration Job is not ready (kstatus would say Current).
	markJobRunning(t, a.migrate)
	g.Eventually(groupPhase(a.ns, "migrate")).WithTimeout(timeout).Should(Equal(wavev1.GroupWaiting))
	expectGated(t, a.webPod)

	markJobComplete(t, a.migrate)
	eventuallyUngated(t, a.webPod)
	markDeploymentReady(t, a.web)
	g.Eventually(func(g Gomega) string {
		return sequenceStatus(g, a.ns).Status.Summary
	}).WithTimeout(timeout).Should(Equal("database 1/1 Released, migrate 1/1 Released, web 1/1 Released"))

	// Wait Jobs: deterministic, labeled, in the wave after their group, owned by the members, never
	// carrying Argo CD tracking labels.
	j := &batchv1JobT{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, j)).To(Succeed())
	g.Expect(j.Labels).To(HaveKeyWithValue(keys.WaitJobLabel, "true"))
	g.Expect(j.Labels).To(HaveKeyWithValue(keys.WaitGroupLabel, "database"))
	g.Expect(j.Labels).NotTo(HaveKey(keys.GroupLabel))
	g.Expect(j.Labels).NotTo(HaveKey("app.kubernetes.io/instance"))
	g.Expect(j.Annotations).To(HaveKeyWithValue(keys.ArgoCDSyncWaveAnnotation, "150"))
	g.Expect(j.OwnerReferences).To(ConsistOf(HaveField("UID", a.db.UID)))
	g.Expect(*j.Spec.ActiveDeadlineSeconds).To(BeNumerically("~", 601, 1), "the group's timeout, counted from its opening")
	g.Expect(j.Spec.Template.Spec.ServiceAccountName).To(Equal(sequence.WaiterServiceAccount))

	// Least-privilege waiter access, provisioned in the namespace.
	role := &rbacRole{}
	g.Eventually(func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: a.ns, Name: sequence.WaiterServiceAccount}, role)
	}).WithTimeout(timeout).Should(Succeed())
	expectLeastPrivilege(g, role.Rules)
}

func TestPodsOfReleasedTemplatesStartWithoutAGate(t *testing.T) {
	g := NewWithT(t)
	a := installApp(t)
	eventuallyUngated(t, a.dbPod)
	g.Eventually(func(g Gomega) []string {
		groups := sequenceStatus(g, a.ns).Status.Groups
		g.Expect(groups).NotTo(BeEmpty())
		return groups[0].ClearedTemplates
	}).WithTimeout(timeout).Should(ContainElement(string(a.db.UID) + "/db-1"))
	// A replacement pod of the released database is admitted without a gate (once the webhook's
	// own informer has the Sequence: a dry run asks it without creating anything).
	g.Eventually(func(g Gomega) []corev1.PodSchedulingGate {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "db-", Namespace: a.ns, Labels: map[string]string{"controller-revision-hash": "db-1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: a.db.UID, Controller: ptr.To(true)}}},
			Spec: a.db.Spec.Template.Spec}
		for k, v := range a.db.Spec.Template.Labels {
			p.Labels[k] = v
		}
		g.Expect(env.Client.Create(context.Background(), p, client.DryRunAll)).To(Succeed())
		return p.Spec.SchedulingGates
	}).WithTimeout(timeout).Should(BeEmpty())
	replacement := podOf(t, a.db, a.db.Spec.Template, "controller-revision-hash", "db-1")
	g.Expect(replacement.Spec.SchedulingGates).To(BeEmpty())
	// The web's pods are still gated: its group is not released-for.
	extra := podOf(t, a.web, a.web.Spec.Template, "pod-template-hash", "v1")
	expectGated(t, extra)
}

func TestWaitJobPodsAreNeverGated(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "waiter", Namespace: ns,
		Labels: map[string]string{keys.WaitJobLabel: "true", keys.WaitGroupLabel: "db", keys.GroupLabel: "db", keys.GroupOrderLabel: "1"}},
		Spec: podSpec("wavegate")}
	g.Expect(env.Client.Create(context.Background(), p)).To(Succeed())
	g.Expect(p.Spec.SchedulingGates).To(BeEmpty())
	g.Expect(p.Annotations).To(BeEmpty())
}

// A claim's readiness depends on its StorageClass (WaitForFirstConsumer), which is cluster-scoped:
// the waiter of a group with a claim gets cluster-wide read access to StorageClasses (a ClusterRole
// of its own, which reads nothing else), bound to its namespace's waiter only, and loses it once no
// wait Job of that namespace needs it.
func TestWaiterClusterAccessFollowsItsJobs(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns, Labels: member("storage", 1)},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	g.Eventually(func() error { return env.Client.Create(ctx, claim) }).WithTimeout(timeout).Should(Succeed())
	g.Expect(env.Client.Create(ctx, deployment(ns, "app", member("app", 2)))).To(Succeed())
	waitJobOf(t, ns, "storage")

	waiter := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sequence.WaiterServiceAccount, Namespace: ns}
	role := &rbacv1.ClusterRole{}
	binding := &rbacv1.ClusterRoleBinding{}
	key := client.ObjectKey{Name: sequence.WaiterStorageClassesRole}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, key, role)).To(Succeed())
		g.Expect(role.Rules).To(Equal([]rbacv1.PolicyRule{{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"},
			Verbs: []string{"get", "list", "watch"}}}))
		g.Expect(env.Client.Get(ctx, key, binding)).To(Succeed())
		g.Expect(binding.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: sequence.WaiterStorageClassesRole}))
		g.Expect(binding.Subjects).To(ContainElement(waiter))
	}).WithTimeout(timeout).Should(Succeed())
	expectLeastPrivilege(g, role.Rules)

	// The claim leaves: its group and wait Job go, and so does the namespace's cluster-wide access
	// (the binding is deleted, or keeps only other namespaces' waiters that still need it).
	g.Expect(env.Client.Delete(ctx, claim)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, key, binding)
		if apierrors.IsNotFound(err) {
			return
		}
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(binding.Subjects).NotTo(ContainElement(waiter))
	}).WithTimeout(timeout).Should(Succeed())
}

// expectLeastPrivilege checks a waiter role's rules: get/list/watch on named kinds, and patch on
// the wait Jobs its waiters mark ready, by name; no wildcard.
func expectLeastPrivilege(g Gomega, rules []rbacv1.PolicyRule) {
	for _, r := range rules {
		g.Expect(r.Resources).NotTo(ContainElement("*"))
		if r.APIGroups[0] == "batch" && len(r.ResourceNames) > 0 {
			g.Expect(r.Resources).To(Equal([]string{"jobs"}))
			g.Expect(r.Verbs).To(Equal([]string{"patch"}))
			continue
		}
		g.Expect(r.Verbs).To(Equal([]string{"get", "list", "watch"}))
		g.Expect(r.ResourceNames).To(BeEmpty())
	}
}
