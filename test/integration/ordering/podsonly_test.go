package ordering

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
)

// barePod creates a pod that no workload owns, as `kubectl run migrate --image=migrate:1
// -l wavegate.io/group=migrate,wavegate.io/group-order=2` does: admission gates it, and no tracked
// member is in its group (pods are never members).
func barePod(t *testing.T, ns, name string, l map[string]string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l}, Spec: podSpec("migrate:1")}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if !sequence.HasGate(p) {
		t.Fatalf("pod %s was not gated at admission", name)
	}
	return p
}

// TestBarePodInAGroupWithoutMembersWaitsForTheEarlierGroups: a gated pod whose group no tracked
// member has (a bare pod, or one of a controller wavegate does not track) is released as a pod of
// an empty group at its order would be: once every earlier group is released, not before, and not
// never. Later groups do not wait for it.
func TestBarePodInAGroupWithoutMembersWaitsForTheEarlierGroups(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	db := statefulSet(ns, "db", member("database", 1))
	web := deployment(ns, "web", member("web", 3))
	for _, o := range []client.Object{db, web} {
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
	}
	dbPod := podOf(t, db, db.Spec.Template, "controller-revision-hash", "db-1")
	webPod := podOf(t, web, web.Spec.Template, "pod-template-hash", "v1")
	migrate := barePod(t, ns, "migrate", member("migrate", 2))

	eventuallyUngated(t, dbPod)
	// The database is not ready: the migration and the web stay gated, and the status counts the
	// migration's gated pod under its group.
	expectGated(t, migrate, webPod)
	g.Eventually(func(g Gomega) wavev1.GroupStatus {
		for _, gs := range sequenceStatus(g, ns).Status.Groups {
			if gs.Name == "migrate" {
				return gs
			}
		}
		return wavev1.GroupStatus{}
	}).WithTimeout(timeout).Should(And(HaveField("Order", int32(2)), HaveField("GatedPods", int32(1)),
		HaveField("Members", int32(0)), HaveField("Phase", wavev1.GroupPending)))

	markStatefulSetReady(t, db)
	// The migration goes once the database is released; the web does not wait for it (a pod is not
	// a member: nothing tells when it is done).
	eventuallyUngated(t, migrate)
	eventuallyUngated(t, webPod)
	g.Eventually(func(g Gomega) []string {
		var names []string
		for _, gs := range sequenceStatus(g, ns).Status.Groups {
			names = append(names, gs.Name)
		}
		return names
	}).WithTimeout(timeout).Should(Equal([]string{"database", "web"}), "a group of released pods only stays in the status")
}

// TestBarePodOfASequenceWithoutMembersIsReleased: a sequence whose only objects are gated pods
// (no tracked member at all) has nothing to wait for: its pods are released, and its Sequence does
// not stay behind.
func TestBarePodOfASequenceWithoutMembersIsReleased(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	migrate := barePod(t, ns, "migrate", member("migrate", 2))
	eventuallyUngated(t, migrate)
	g.Eventually(func() bool {
		err := env.Client.Get(context.Background(), client.ObjectKey{Name: sequence.ObjectName(ns)}, &wavev1.Sequence{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(timeout).Should(BeTrue(), "the Sequence of a sequence without members stayed")
	got := &corev1.Pod{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(migrate), got)).To(Succeed())
	g.Expect(got.Labels).To(HaveKeyWithValue(keys.AdmittedLabel, "true"))
}
