package ordering

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLaterGroupAppliedFirstWaitsForTheEarlier: one sync creates the objects of several groups
// in its own order, as Argo CD applies a wave by kind: the database's Service (ready at once), the
// web's Deployment (its pod gated at once), then the database's StatefulSet and the migration's
// Job, each a moment after the last. The web's pod waits for all of them: it is not released on
// the database as it was when the pod was created (its Service alone). The wait Jobs run for real
// against this API server (the suite's runner), so without the settle the Service's waiter
// releases the web before the StatefulSet arrives.
func TestLaterGroupAppliedFirstWaitsForTheEarlier(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, Labels: member("database", 1)},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"}, Ports: []corev1.ServicePort{{Port: 5432}}}}
	g.Expect(env.Client.Create(ctx, svc)).To(Succeed())
	web := deployment(ns, "web", member("web", 3))
	g.Expect(env.Client.Create(ctx, web)).To(Succeed())
	webPod := podOf(t, web, web.Spec.Template, "pod-template-hash", "v1")
	// The sync goes on applying, a hundred milliseconds per object.
	time.Sleep(100 * time.Millisecond)
	db := statefulSet(ns, "db", member("database", 1))
	g.Expect(env.Client.Create(ctx, db)).To(Succeed())
	time.Sleep(100 * time.Millisecond)
	migrate := job(ns, "migrate", member("migrate", 2))
	g.Expect(env.Client.Create(ctx, migrate)).To(Succeed())
	expectGated(t, webPod)
}
