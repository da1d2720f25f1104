package ordering

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
	"wavegate.io/wavegate/pkg/waiter"
	"wavegate.io/wavegate/test/framework"
)

func withSequence(l map[string]string, seq string) map[string]string {
	l[keys.SequenceLabel] = seq
	return l
}

// TestTenantCannotCaptureAnotherSequence: an object in one namespace that names another namespace's
// sequence is denied at CREATE and on a label change, naming the label and how a platform team
// allows it; the victim's own ordering runs as if the tenant did not exist.
func TestTenantCannotCaptureAnotherSequence(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	victim, tenant := namespace(t), namespace(t)

	capture := deployment(tenant, "zzz", withSequence(member("zzz", 0), victim))
	err := env.Client.Create(ctx, capture)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(And(
		ContainSubstring("metadata.labels[wavegate.io/sequence]"),
		ContainSubstring("namespace "+tenant+" may join only its own sequences"),
		ContainSubstring("spec.sequences entry {name: "+victim+"} whose namespaceSelector selects namespace "+tenant)))

	own := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: tenant, Labels: member("zzz", 0)}}
	g.Expect(env.Client.Create(ctx, own)).To(Succeed())
	own.Labels[keys.SequenceLabel] = victim
	g.Expect(env.Client.Update(ctx, own)).To(MatchError(ContainSubstring("may join only its own sequences")), "a label change is checked too")

	// The victim's app: a database group, then web; web's pod is released once the database is.
	db := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: victim, Labels: member("database", 0)}}
	web := deployment(victim, "web", member("web", 1))
	g.Expect(env.Client.Create(ctx, db)).To(Succeed())
	g.Expect(env.Client.Create(ctx, web)).To(Succeed())
	pod := podOf(t, web, web.Spec.Template, "pod-template-hash", "v1")
	eventuallyUngated(t, pod)
	// The status is written after the ungating, in the same reconcile or the next one.
	g.Eventually(func(g Gomega) string { return sequenceStatus(g, victim).Status.Summary }).WithTimeout(timeout).
		Should(Equal("database 1/1 Released, web 0/1 Waiting"))
}

// TestTenantsSelfGatedPodsAreReleasedApart: a tenant's pod may name another namespace's sequence and
// carry wavegate's scheduling gate itself (pods are never denied). It is not that sequence's pod: the
// stranger-pods controller, not the other namespace's passes, removes the gate, and tells the
// tenant why on the pod.
func TestTenantsSelfGatedPodsAreReleasedApart(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	victim, tenant := namespace(t), namespace(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: tenant, Labels: withSequence(member("web", 1), victim)},
		Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: keys.SchedulingGate}},
			Containers: []corev1.Container{{Name: "c", Image: "app"}}},
	}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	eventuallyUngated(t, pod)
	g.Eventually(func(g Gomega) []string {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs, client.InNamespace(tenant))).To(Succeed())
		var notes []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Pod" && e.Regarding.Name == pod.Name {
				notes = append(notes, e.Reason+": "+e.Note)
			}
		}
		return notes
	}).WithTimeout(timeout).Should(ContainElement(HavePrefix(sequence.ReasonOutsideSequence + ": namespace " + tenant + " may not join sequence")))
}

// TestPodsOfANamespaceThatMayNoLongerJoinAreReleased: a shared sequence's pod waits for an earlier
// group's member of another namespace. Once its namespace may no longer join the sequence (its
// labels no longer match the declaration's selector, or the declaration changes), nothing orders
// the pod, and the stranger-pods controller releases it; the sequence's passes leave it alone.
func TestPodsOfANamespaceThatMayNoLongerJoinAreReleased(t *testing.T) {
	for _, how := range []string{"namespace relabeled", "declaration changed"} {
		t.Run(how, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			team := "t" + rand.String(6)
			shared := "platform-" + team
			selects := &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}
			p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: shared}, Spec: wavev1.WavePolicySpec{Sequences: []wavev1.SharedSequence{{
				Name: shared, NamespaceSelector: selects}}}}
			g.Expect(env.Client.Create(ctx, p)).To(Succeed())
			t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
			a, b := namespace(t), namespace(t)
			for _, ns := range []string{a, b} {
				n := &corev1.Namespace{}
				g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: ns}, n)).To(Succeed())
				n.Labels["team"] = team
				g.Expect(env.Client.Update(ctx, n)).To(Succeed())
			}
			// The database never becomes ready here (no Deployment controller runs).
			db := deployment(a, "db", withSequence(member("database", 0), shared))
			g.Eventually(func() error { return env.Client.Create(ctx, db) }).WithTimeout(timeout).Should(Succeed())
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: b, Labels: withSequence(member("web", 1), shared)},
				Spec: podSpec("web")}
			g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
			g.Expect(gated(g, pod)).To(BeTrue(), "admission gates the shared sequence's pod")
			expectGated(t, pod)

			switch how {
			case "namespace relabeled":
				n := &corev1.Namespace{}
				g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: b}, n)).To(Succeed())
				delete(n.Labels, "team")
				g.Expect(env.Client.Update(ctx, n)).To(Succeed())
			case "declaration changed":
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
				p.Spec.Sequences[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: a}}
				g.Expect(env.Client.Update(ctx, p)).To(Succeed())
			}
			eventuallyUngated(t, pod)
		})
	}
}

// TestDeclaredSharedSequence: a platform team declares a sequence shared by the namespaces it
// selects; objects there join it (the database of one team orders the app of another), objects of
// other namespaces and cluster-scoped objects may not.
func TestDeclaredSharedSequence(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	team := "t" + rand.String(6)
	shared := "platform-" + team
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: shared}, Spec: wavev1.WavePolicySpec{Sequences: []wavev1.SharedSequence{{
		Name: shared, NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}}}}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	a, b, other := namespace(t), namespace(t), namespace(t)
	for _, ns := range []string{a, b} {
		n := &corev1.Namespace{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: ns}, n)).To(Succeed())
		n.Labels["team"] = team
		g.Expect(env.Client.Update(ctx, n)).To(Succeed())
	}

	db := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: a, Labels: withSequence(member("database", 1), shared)}}
	g.Eventually(func() error { return env.Client.Create(ctx, db) }).WithTimeout(timeout).Should(Succeed())
	web := deployment(b, "web", withSequence(member("web", 2), shared))
	g.Expect(env.Client.Create(ctx, web)).To(Succeed())
	pod := podOf(t, web, web.Spec.Template, "pod-template-hash", "v1")
	eventuallyUngated(t, pod)
	g.Eventually(func(g Gomega) string { return sequenceStatus(g, shared).Status.Summary }).WithTimeout(timeout).
		Should(Equal("database 1/1 Released, web 0/1 Waiting"))

	intruder := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: other, Labels: withSequence(member("zzz", 0), shared)}}
	g.Expect(env.Client.Create(ctx, intruder)).To(MatchError(ContainSubstring("namespace " + other + " may join only its own sequences")))
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "x-" + team, Labels: withSequence(member("zzz", 0), shared)}}
	g.Expect(env.Client.Create(ctx, cr)).To(MatchError(ContainSubstring("add {name: " + shared + ", clusterScoped: true}")))

	// The policy says where it applies.
	g.Eventually(func(g Gomega) []string {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		return p.Status.Namespaces
	}).WithTimeout(timeout).Should(ContainElements(a, b, other), "a policy without a namespaceSelector applies to every opted-in namespace")
}

// sharedSequence declares a shared sequence over two new namespaces, a and b, each with its own
// policy (specs[0] for a, specs[1] for b; their namespace selectors are set here), and returns
// the sequence's name, the namespaces, and the labels of a member of a group of it.
func sharedSequence(t *testing.T, specs [2]wavev1.WavePolicySpec) (seq, a, b string, in func(group string) map[string]string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	team := "t" + rand.String(6)
	seq = "platform-" + team
	a, b = namespace(t), namespace(t)
	policies := []*wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: seq}, Spec: wavev1.WavePolicySpec{Sequences: []wavev1.SharedSequence{{
		Name: seq, NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}}}}}}
	for i, ns := range []string{a, b} {
		spec := specs[i]
		spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
		policies = append(policies, &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: seq + "-" + []string{"a", "b"}[i]}, Spec: spec})
	}
	for _, p := range policies {
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	}
	for _, ns := range []string{a, b} {
		n := &corev1.Namespace{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: ns}, n)).To(Succeed())
		n.Labels["team"] = team
		g.Expect(env.Client.Update(ctx, n)).To(Succeed())
	}
	return seq, a, b, func(group string) map[string]string {
		return withSequence(map[string]string{keys.GroupLabel: group}, seq)
	}
}

// TestSharedSequenceJudgesEachMemberByItsOwnPolicy: the policies of two namespaces of a declared
// shared sequence define group svc with different readiness settings: namespace a's the defaults,
// b's wants a LoadBalancer Service to have an address. The member that orders the group is a's
// ConfigMap; b's Service, without an address, is not ready by its own policy, so the next group's
// pod stays gated until the Service has one (the wait Job judged every member by a's settings,
// and released it at once).
func TestSharedSequenceJudgesEachMemberByItsOwnPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	shared, a, b, in := sharedSequence(t, [2]wavev1.WavePolicySpec{
		{Groups: []wavev1.GroupSpec{{Name: "svc", Order: 1}, {Name: "web", Order: 2}}},
		{Groups: []wavev1.GroupSpec{{Name: "svc", Order: 1}}, Readiness: wavev1.Readiness{LoadBalancerIngress: true}},
	})

	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: a, Labels: in("svc")}}
	g.Eventually(func() error { return env.Client.Create(ctx, settings) }).WithTimeout(timeout).Should(Succeed())
	lb := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb", Namespace: b, Labels: in("svc")},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	g.Eventually(func() error { return env.Client.Create(ctx, lb) }).WithTimeout(timeout).Should(Succeed())
	web := deployment(a, "web", in("web"))
	g.Expect(env.Client.Create(ctx, web)).To(Succeed())
	pod := podOf(t, web, web.Spec.Template, "pod-template-hash", "v1")
	g.Eventually(func(g Gomega) string { return sequenceStatus(g, shared).Status.Summary }).WithTimeout(timeout).
		Should(HavePrefix("svc 1/2 "), "the status judges the Service by its own namespace's policy")
	expectGated(t, pod)

	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(lb), lb)).To(Succeed())
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	g.Expect(env.Client.Status().Update(ctx, lb)).To(Succeed())
	eventuallyUngated(t, pod)
}

// TestNothingHappensOutsideOptedInNamespaces: labeled objects in a namespace that did not opt in get
// no Sequence, wait Job, waiter RBAC or finalizer; a namespace that opts out is released and what
// wavegate created for it goes away.
func TestNothingHappensOutsideOptedInNamespaces(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "plain-"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns.Name, Labels: member("database", 1)}}
	g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
	g.Expect(cm.Finalizers).To(BeEmpty())
	untouched := func(g Gomega, ns string) {
		err := env.Client.Get(ctx, client.ObjectKey{Name: sequence.ObjectName(ns)}, &wavev1.Sequence{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a Sequence exists for %s", ns)
		var jobs batchv1.JobList
		g.Expect(env.Client.List(ctx, &jobs, client.InNamespace(ns))).To(Succeed())
		g.Expect(jobs.Items).To(BeEmpty())
		var sas corev1.ServiceAccountList
		g.Expect(env.Client.List(ctx, &sas, client.InNamespace(ns))).To(Succeed())
		g.Expect(sas.Items).To(BeEmpty())
		var rbs rbacv1.RoleBindingList
		g.Expect(env.Client.List(ctx, &rbs, client.InNamespace(ns))).To(Succeed())
		g.Expect(rbs.Items).To(BeEmpty())
	}
	cm.Data = map[string]string{"secret-ish": "value"}
	g.Expect(env.Client.Update(ctx, cm)).To(Succeed())
	g.Consistently(func(g Gomega) { untouched(g, ns.Name) }).WithTimeout(3 * time.Second).Should(Succeed())
	// The tracker keeps only its metadata; opting the namespace in re-lists it in full.
	cached := func(g Gomega) map[string]any {
		for _, o := range mgr.Wavegate.Members.Members(ns.Name) {
			if o.GetName() == "db" {
				return o.Object
			}
		}
		g.Expect("db").To(BeEmpty(), "the ConfigMap is not tracked")
		return nil
	}
	g.Eventually(func(g Gomega) map[string]any { return cached(g) }).WithTimeout(timeout).ShouldNot(HaveKey("data"))
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ns), ns)).To(Succeed())
	ns.Labels = map[string]string{keys.EnabledLabel: "true"}
	g.Expect(env.Client.Update(ctx, ns)).To(Succeed())
	g.Eventually(func(g Gomega) map[string]any { return cached(g) }).WithTimeout(timeout).Should(HaveKey("data"))
	g.Eventually(func(g Gomega) string { return sequenceStatus(g, ns.Name).Status.Summary }).WithTimeout(timeout).
		Should(HavePrefix("database 1/1"))

	// Opted in: a Sequence and a wait Job; opted out again: both go, and the finalizer is released.
	in := namespace(t)
	db := statefulSet(in, "db", member("database", 1))
	g.Expect(env.Client.Create(ctx, db)).To(Succeed())
	g.Expect(db.Finalizers).To(ContainElement(keys.TeardownFinalizer))
	g.Eventually(func(g Gomega) string {
		groups := sequenceStatus(g, in).Status.Groups
		g.Expect(groups).NotTo(BeEmpty())
		return groups[0].WaitJob
	}).WithTimeout(timeout).ShouldNot(BeEmpty())
	n := &corev1.Namespace{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: in}, n)).To(Succeed())
	delete(n.Labels, keys.EnabledLabel)
	g.Expect(env.Client.Update(ctx, n)).To(Succeed())
	g.Eventually(func(g Gomega) { untouched(g, in) }).WithTimeout(timeout).Should(Succeed())
	g.Eventually(func(g Gomega) []string {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(db), db)).To(Succeed())
		return db.Finalizers
	}).WithTimeout(timeout).ShouldNot(ContainElement(keys.TeardownFinalizer))
}

// TestDependencyInversionIsNamedAtOnce: a web Deployment (group web, order 1) mounts a ConfigMap
// labeled into a later group (config, order 2). The web cannot become ready before the ConfigMap's
// group, which waits for it: within seconds, not at the timeout, the Sequence says so with a
// condition and a Warning Event naming both objects and the fix.
func TestDependencyInversionIsNamedAtOnce(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	web := deployment(ns, "web", member("web", 1))
	web.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}}
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns, Labels: member("config", 2)}}
	g.Expect(env.Client.Create(ctx, web)).To(Succeed())
	g.Expect(env.Client.Create(ctx, settings)).To(Succeed())
	want := "Deployment " + ns + "/web (group web) mounts ConfigMap " + ns + "/settings of the later group config: " +
		"move ConfigMap settings to group web or earlier, or Deployment web to group config or later"
	g.Eventually(func(g Gomega) string {
		c := meta.FindStatusCondition(sequenceStatus(g, ns).Status.Conditions, sequence.ConditionDependencyInversion)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		return c.Message
	}).WithTimeout(5 * time.Second).Should(Equal(want))
	g.Eventually(func(g Gomega) []string {
		var evs eventsv1.EventList
		g.Expect(env.Client.List(ctx, &evs)).To(Succeed())
		var notes []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Sequence" && e.Regarding.Name == ns && e.Type == corev1.EventTypeWarning {
				notes = append(notes, e.Reason+": "+e.Note)
			}
		}
		return notes
	}).WithTimeout(5 * time.Second).Should(ContainElement(sequence.ReasonDependencyInversion + ": " + want))

	// Fixed by moving the ConfigMap to the web's group: the condition clears.
	settings.Labels = member("web", 1)
	g.Expect(env.Client.Update(ctx, settings)).To(Succeed())
	g.Eventually(func(g Gomega) metav1.ConditionStatus {
		return meta.FindStatusCondition(sequenceStatus(g, ns).Status.Conditions, sequence.ConditionDependencyInversion).Status
	}).WithTimeout(5 * time.Second).Should(Equal(metav1.ConditionFalse))
}

// TestForgedWaitJobGetsNoAccessElsewhere: any tenant that may create Jobs can make one labeled and
// shaped like a wait Job, naming members in another namespace and cluster-wide. The waiter-RBAC
// controller grants its namespace's waiter only what the tenant's own sequence may hold: a Role
// in its own namespace, none in the victim's, and no ClusterRole on a namespaced kind.
func TestForgedWaitJobGetsNoAccessElsewhere(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	victim, tenant := namespace(t), namespace(t)
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	args := waiter.Args{Sequence: tenant, Group: "x", Members: []waiter.Member{
		{GVR: configMaps, Namespace: tenant, Name: "own"},
		{GVR: configMaps, Namespace: victim, Name: "theirs"},
		{GVR: configMaps, Name: "everyone's"},
	}}
	forged := forgedWaitJob(tenant, args)
	// Every Role and RoleBinding written in the victim's namespace, and every waiter ClusterRole,
	// from before the Job. The victim's namespace has its own waiter's Role (without rules while
	// it runs no wait Job): it must neither gain rules nor be bound to the tenant's waiter.
	cs := kubernetes.NewForConfigOrDie(env.Config)
	roles, err := cs.RbacV1().Roles(victim).Watch(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer roles.Stop()
	bindings, err := cs.RbacV1().RoleBindings(victim).Watch(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer bindings.Stop()
	clusterRoles, err := cs.RbacV1().ClusterRoles().Watch(ctx, metav1.ListOptions{LabelSelector: keys.WaiterRBACLabel + "=true"})
	g.Expect(err).NotTo(HaveOccurred())
	defer clusterRoles.Stop()

	t.Cleanup(func() { _ = env.Client.Delete(ctx, forged) })
	// The pass that writes the tenant's own Role writes everything the Job gets, a moment apart;
	// the watches see all of it. wavegate deletes the Job soon after (no group of the tenant's
	// sequence has it), which may come before the waiter-RBAC controller has seen it: the tenant
	// creates it again until it is provisioned.
	own := &rbacv1.Role{}
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(forged), &batchv1.Job{})
		if apierrors.IsNotFound(err) {
			j := forged.DeepCopy()
			g.Expect(env.Client.Create(ctx, j)).To(Succeed())
		}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: sequence.WaiterServiceAccount}, own)).To(Succeed())
		g.Expect(own.Rules).To(ContainElement(HaveField("Resources", ContainElement("configmaps"))))
	}).WithTimeout(timeout).Should(Succeed())
	for deadline := time.After(2 * time.Second); ; {
		select {
		case ev := <-roles.ResultChan():
			if ro, ok := ev.Object.(*rbacv1.Role); ok && len(ro.Rules) > 0 {
				t.Fatalf("a tenant's Job got access in another namespace: %s %v", ev.Type, ro.Rules)
			}
		case ev := <-bindings.ResultChan():
			if rb, ok := ev.Object.(*rbacv1.RoleBinding); ok {
				for _, sub := range rb.Subjects {
					g.Expect(sub.Namespace).To(Equal(victim), "a tenant's waiter was bound in another namespace")
				}
			}
		case ev := <-clusterRoles.ResultChan():
			if cr, ok := ev.Object.(*rbacv1.ClusterRole); ok {
				for _, rule := range cr.Rules {
					g.Expect(rule.Resources).NotTo(ContainElement("configmaps"), "a tenant's Job got cluster-wide access to ConfigMaps")
				}
			}
		case <-deadline:
			return
		}
	}
}

// TestWaiterAccessFollowsOptIn: against a real API server (which checks a RoleBinding's role),
// a namespace gets its waiter's ServiceAccount, a Role without rules and its RoleBinding when it
// opts in; its first wait Job then starts unsuspended and the Role gains exactly its members'
// kinds, and the patch of that Job (its waiter marks it ready); opted out, the namespace loses all of it.
func TestWaiterAccessFollowsOptIn(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	key := client.ObjectKey{Namespace: ns, Name: sequence.WaiterServiceAccount}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, key, &corev1.ServiceAccount{})).To(Succeed())
		ro := &rbacv1.Role{}
		g.Expect(env.Client.Get(ctx, key, ro)).To(Succeed())
		g.Expect(ro.Rules).To(BeEmpty(), "a Role with rules before any wait Job")
		rb := &rbacv1.RoleBinding{}
		g.Expect(env.Client.Get(ctx, key, rb)).To(Succeed())
		g.Expect(rb.Subjects).To(ConsistOf(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sequence.WaiterServiceAccount, Namespace: ns}))
	}).WithTimeout(timeout).Should(Succeed())

	// The wait Job as it was created (a resume a moment later would look the same afterwards).
	jobs, err := kubernetes.NewForConfigOrDie(env.Config).BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer jobs.Stop()
	db := statefulSet(ns, "db", member("database", 1))
	g.Expect(env.Client.Create(ctx, db)).To(Succeed())
	var ev watch.Event
	g.Eventually(jobs.ResultChan()).WithTimeout(timeout).Should(Receive(&ev))
	g.Expect(ev.Type).To(Equal(watch.Added))
	g.Expect(ev.Object.(*batchv1.Job).Spec.Suspend).To(HaveValue(BeFalse()), "the wait Job was created to wait for access its namespace already had")
	g.Eventually(func(g Gomega) []rbacv1.PolicyRule {
		ro := &rbacv1.Role{}
		g.Expect(env.Client.Get(ctx, key, ro)).To(Succeed())
		return ro.Rules
	}).WithTimeout(timeout).Should(ConsistOf(rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"patch"}, ResourceNames: []string{ev.Object.(*batchv1.Job).Name}}))

	n := &corev1.Namespace{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: ns}, n)).To(Succeed())
	delete(n.Labels, keys.EnabledLabel)
	g.Expect(env.Client.Update(ctx, n)).To(Succeed())
	for _, o := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		g.Eventually(func() bool { return apierrors.IsNotFound(env.Client.Get(ctx, key, o)) }).WithTimeout(timeout).
			Should(BeTrue(), "%T stays in a namespace that opted out", o)
	}
}

// TestTenantWaitersReadNothingClusterWideButStorageClasses: a sequence declared clusterScoped has a
// cluster-scoped member, whose group's wait Job runs in wavegate's namespace; another tenant has a
// claim, whose waiter reads StorageClasses; the tenant of the clusterScoped sequence's namespace
// forges a wait Job of that sequence in its own namespace, naming cluster-scoped kinds. As the API
// server authorizes them, only wavegate's waiter reads the cluster-scoped member's kind, the
// claim's waiter reads StorageClasses and nothing else cluster-wide, and the forged Job's waiter
// nothing cluster-wide; no ClusterRole bound to a tenant's waiter ever reads more than
// StorageClasses.
func TestTenantWaitersReadNothingClusterWideButStorageClasses(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	owner, claims := namespace(t), namespace(t)
	p := &wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: "cluster-" + owner}, Spec: wavev1.WavePolicySpec{
		Sequences: []wavev1.SharedSequence{{Name: owner, ClusterScoped: true}}}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })

	// Every waiter ClusterRole and ClusterRoleBinding written from now on.
	cs := kubernetes.NewForConfigOrDie(env.Config)
	waiterRBAC := metav1.ListOptions{LabelSelector: keys.WaiterRBACLabel + "=true"}
	roles, err := cs.RbacV1().ClusterRoles().Watch(ctx, waiterRBAC)
	g.Expect(err).NotTo(HaveOccurred())
	defer roles.Stop()
	bindings, err := cs.RbacV1().ClusterRoleBindings().Watch(ctx, waiterRBAC)
	g.Expect(err).NotTo(HaveOccurred())
	defer bindings.Stop()

	// The sequence's cluster-scoped member (admitted once the policy is loaded), and the claim.
	operator := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "member-" + owner, Labels: withSequence(member("rbac", 1), owner)}}
	g.Eventually(func() error { return env.Client.Create(ctx, operator) }).WithTimeout(timeout).Should(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, operator) })
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: claims, Labels: member("storage", 1)},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	g.Eventually(func() error { return env.Client.Create(ctx, claim) }).WithTimeout(timeout).Should(Succeed())

	gvr := func(group, resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: "v1", Resource: resource}
	}
	nodes, clusterRoleBindings, clusterRoles := gvr("", "nodes"), gvr(rbacv1.GroupName, "clusterrolebindings"), gvr(rbacv1.GroupName, "clusterroles")
	args := waiter.Args{Sequence: owner, Group: "rbac", Members: []waiter.Member{
		{GVR: nodes, Name: "node-0"}, {GVR: clusterRoleBindings, Name: "cluster-admin"}, {GVR: clusterRoles, Name: operator.Name}}}
	forged := forgedWaitJob(owner, args)
	t.Cleanup(func() { _ = env.Client.Delete(ctx, forged) })
	// wavegate deletes the forged Job (no group of the sequence has it), maybe before the
	// waiter-RBAC controller has seen it: the tenant creates it again until its namespace's Role
	// lets its waiter mark it, which the pass that provisions the Job writes.
	g.Eventually(func(g Gomega) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(forged), &batchv1.Job{}); apierrors.IsNotFound(err) {
			g.Expect(env.Client.Create(ctx, forged.DeepCopy())).To(Succeed())
		}
		own := &rbacv1.Role{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: owner, Name: sequence.WaiterServiceAccount}, own)).To(Succeed())
		g.Expect(own.Rules).To(ContainElement(HaveField("ResourceNames", ContainElement(forged.Name))))
	}).WithTimeout(timeout).Should(Succeed())

	// may asks the API server whether namespace ns's waiter may list r cluster-wide.
	may := func(g Gomega, ns string, r schema.GroupVersionResource) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + ns + ":" + sequence.WaiterServiceAccount,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Group: r.Group, Version: r.Version, Resource: r.Resource}}}
		g.Expect(env.Client.Create(ctx, sar)).To(Succeed())
		return sar.Status.Allowed
	}
	storageClasses := gvr("storage.k8s.io", "storageclasses")
	g.Eventually(func(g Gomega) {
		g.Expect(may(g, framework.WavegateNamespace, clusterRoles)).To(BeTrue(), "wavegate's waiter may not read its cluster-scoped member's kind")
		g.Expect(may(g, claims, storageClasses)).To(BeTrue(), "the claim's waiter may not read StorageClasses")
	}).WithTimeout(timeout).Should(Succeed())

	// What the watches saw: no ClusterRole that reads more than StorageClasses was ever bound to a
	// tenant's waiter.
	wide := map[string]bool{}
	tenants := map[string]bool{}
watching:
	for deadline := time.After(2 * time.Second); ; {
		select {
		case ev := <-roles.ResultChan():
			if cr, ok := ev.Object.(*rbacv1.ClusterRole); ok {
				for _, rule := range cr.Rules {
					if !slices.Equal(rule.Resources, []string{"storageclasses"}) {
						wide[cr.Name] = true
					}
				}
			}
		case ev := <-bindings.ResultChan():
			if crb, ok := ev.Object.(*rbacv1.ClusterRoleBinding); ok {
				for _, s := range crb.Subjects {
					if s.Namespace != framework.WavegateNamespace {
						tenants[crb.RoleRef.Name] = true
					}
				}
			}
		case <-deadline:
			break watching
		}
	}
	for name := range tenants {
		g.Expect(wide).NotTo(HaveKey(name), "ClusterRole %s, which reads more than StorageClasses, was bound to a tenant's waiter", name)
	}
	for _, ns := range []string{owner, claims} {
		for _, r := range []schema.GroupVersionResource{nodes, clusterRoleBindings, clusterRoles} {
			g.Expect(may(g, ns, r)).To(BeFalse(), "the waiter of tenant %s may list %s", ns, r.Resource)
		}
	}
}

// forgedWaitJob is a Job a tenant writes in its namespace to look like a wait Job of sequence seq
// (the namespace's own), suspended, whose waiter would watch args' members.
func forgedWaitJob(seq string, args waiter.Args) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: seq,
			Labels: map[string]string{keys.WaitJobLabel: "true", keys.WaitSequenceLabel: seq}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "wait", Image: "wavegate:test", Args: args.Encode()}}}}},
	}
}

// webThenDBRequiredInB returns the policies of a shared sequence's namespaces a and b: both order
// web, and only b's requires db before it. A new value each time: creating a policy decodes the
// API server's answer into its spec.
func webThenDBRequiredInB() [2]wavev1.WavePolicySpec {
	return [2]wavev1.WavePolicySpec{
		{Groups: []wavev1.GroupSpec{{Name: "web", Order: 2}}},
		{Groups: []wavev1.GroupSpec{{Name: "db", Order: 1, Required: true}, {Name: "web", Order: 2}}},
	}
}

// TestSharedSequenceWaitsForEachPolicysRequiredGroups: in a platform-declared shared sequence, a
// group with members in two namespaces waits for the groups that either namespace's policy
// requires, not only for those of the member that orders it. Namespace b's policy requires its
// database before web; a's Deployment orders web (its reference sorts first), and a's policy
// requires nothing: web's pods stay gated until b's database exists and is ready.
func TestSharedSequenceWaitsForEachPolicysRequiredGroups(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	shared, a, b, in := sharedSequence(t, webThenDBRequiredInB())

	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: b, Labels: in("web")}}
	g.Eventually(func() error { return env.Client.Create(ctx, settings) }).WithTimeout(timeout).Should(Succeed())
	web := deployment(a, "web", in("web"))
	g.Eventually(func() error { return env.Client.Create(ctx, web) }).WithTimeout(timeout).Should(Succeed())
	pod := podOf(t, web, web.Spec.Template, "pod-template-hash", "v1")
	g.Eventually(groupPhase(shared, "db")).WithTimeout(timeout).Should(Equal(wavev1.GroupWaiting))
	expectGated(t, pod)

	db := statefulSet(b, "db", in("db"))
	g.Expect(env.Client.Create(ctx, db)).To(Succeed())
	expectGated(t, pod)
	markStatefulSetReady(t, db)
	eventuallyUngated(t, pod)
}

// TestPodsWaitingForTheirPolicysRequiredGroupAreReported: web's only member is in namespace a,
// whose policy requires nothing before it, so web is released; a pod of web in namespace b, whose
// policy requires db, waits for db, which has no members yet. The Sequence says so, and is not
// Ready (it said web Released and every group released, with the pod gated).
func TestPodsWaitingForTheirPolicysRequiredGroupAreReported(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	shared, a, b, in := sharedSequence(t, webThenDBRequiredInB())
	web := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: a, Labels: in("web")}}
	g.Eventually(func() error { return env.Client.Create(ctx, web) }).WithTimeout(timeout).Should(Succeed())
	pod := barePod(t, b, "web-b", in("web"))
	g.Eventually(func(g Gomega) {
		s := sequenceStatus(g, shared)
		var msg string
		for _, gs := range s.Status.Groups {
			if gs.Name == "web" {
				msg = gs.Message
			}
		}
		g.Expect(msg).To(ContainSubstring("some of its pods wait for group db"))
		g.Expect(meta.IsStatusConditionFalse(s.Status.Conditions, "Ready")).To(BeTrue())
	}).WithTimeout(timeout).Should(Succeed())
	expectGated(t, pod)
}
