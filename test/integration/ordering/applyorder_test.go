package ordering

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/sequence"
)

// TestLaterGroupAppliedFirstWaitsForTheEarlier: one sync creates the objects of several groups
// in its own order, as Argo CD applies a wave by kind: the database's Service (ready at once), the
// web's Deployment (its pod gated at once), then the database's StatefulSet and the migration's
// Job, each a moment after the last. The web's pod waits for all of them: it is not released on
// the database as it was when the pod was created (its Service alone). The wait Jobs run for real
// against this API server (the suite's runner), so without the settle the Service's waiter
// releases the web before the StatefulSet arrives. A sync on a loaded machine is slower than the
// settle's 150 ms: the settle then follows the sync's pace, and still ends.
func TestLaterGroupAppliedFirstWaitsForTheEarlier(t *testing.T) {
	for _, pace := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond} {
		t.Run(fmt.Sprintf("an object every %s", pace), func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := namespace(t)
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, Labels: member("database", 1)},
				Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"}, Ports: []corev1.ServicePort{{Port: 5432}}}}
			g.Expect(env.Client.Create(ctx, svc)).To(Succeed())
			// The sync applies one object after the other, at its pace.
			time.Sleep(pace)
			web := deployment(ns, "web", member("web", 3))
			g.Expect(env.Client.Create(ctx, web)).To(Succeed())
			webPod := podOf(t, web, web.Spec.Template, "pod-template-hash", "v1")
			time.Sleep(pace)
			db := statefulSet(ns, "db", member("database", 1))
			g.Expect(env.Client.Create(ctx, db)).To(Succeed())
			time.Sleep(pace)
			migrate := job(ns, "migrate", member("migrate", 2))
			g.Expect(env.Client.Create(ctx, migrate)).To(Succeed())
			expectGated(t, webPod)
			// And the settle ends: the web goes once the groups before it are ready.
			markStatefulSetReady(t, db)
			markJobComplete(t, migrate)
			eventuallyUngated(t, webPod)
		})
	}
}

// TestMembersThatNeverSettleHoldTheGroupsForABoundedTime: a member whose spec changes without
// pause (two controllers fighting over it) keeps its sequence from settling. The groups stay closed
// and the Sequence says why (reason Settling), but only for the settle's bound: the first group's pod
// is released while the member still changes. (A pause of the changes, 150 ms in which a pass sees
// them quiet, would release it earlier; the test changes the member back to back to leave none.)
func TestMembersThatNeverSettleHoldTheGroupsForABoundedTime(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns := namespace(t)
	db := deployment(ns, "db", member("database", 1))
	g.Expect(env.Client.Create(ctx, db)).To(Succeed())
	dbPod := podOf(t, db, db.Spec.Template, "pod-template-hash", "v1")
	noisy := deployment(ns, "noisy", member("web", 2))
	g.Expect(env.Client.Create(ctx, noisy)).To(Succeed())
	began := time.Now()
	flapped := make(chan struct{})
	go func() {
		defer close(flapped)
		for i := 0; ctx.Err() == nil; i++ {
			p := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"flap":"%d"}}}}}`, i)
			if err := env.Client.Patch(ctx, noisy, client.RawPatch(types.MergePatchType, []byte(p))); err != nil && ctx.Err() == nil {
				t.Errorf("changing %s: %v", noisy.Name, err)
				return
			}
		}
	}()
	defer func() { cancel(); <-flapped }()

	readyReason := func(g Gomega) string {
		c := meta.FindStatusCondition(sequenceStatus(g, ns).Status.Conditions, "Ready")
		g.Expect(c).NotTo(BeNil())
		return c.Reason
	}
	g.Eventually(readyReason).WithTimeout(timeout).Should(Equal(sequence.ReasonSettling))
	g.Expect(gated(g, dbPod)).To(BeTrue(), "the first group opened while its sequence's members were changing")
	g.Eventually(func(g Gomega) bool { return gated(g, dbPod) }).WithTimeout(settleMax+timeout).
		WithPolling(100*time.Millisecond).Should(BeFalse(), "the first group stayed closed while a later member kept changing")
	released := time.Since(began)
	t.Logf("the first group's pod was released %s after the changes began", released.Round(time.Millisecond))
	g.Expect(released).To(BeNumerically(">=", settleMax-time.Second), "the first group opened long before the settle's bound while a later member kept changing")
	select {
	case <-flapped:
		t.Fatal("the member stopped changing before the first group was released")
	default:
	}
	g.Eventually(readyReason).WithTimeout(timeout).ShouldNot(Equal(sequence.ReasonSettling),
		"the settle no longer holds the groups: the status must not say it does")
}
