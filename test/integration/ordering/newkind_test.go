package ordering

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/test/framework"
)

// TestNewKindHoldsTheGroupsAfterIt: Helm installs a chart's crds/ first, waits for them to be
// Established, then applies its templates. The custom resources of a new CRD are tracked only once
// discovery serves the kind and its informer has listed (up to a few seconds after the CRD is
// Established): until then a group of them was in no plan and in no consistent read, so a later
// group's pods were released as if nothing came before them. After a CRD comes, the sequences are
// held until its kind is tracked: the web pod created with the CRD stays gated, and once the
// database's custom resource (not ready) is there, it waits for it.
func TestNewKindHoldsTheGroupsAfterIt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	crd := framework.SchemalessCRD(schema.GroupVersionResource{Group: "newkind.example.com", Version: "v1", Resource: "databases"}, "Database", apiextensionsv1.NamespaceScoped)
	g.Expect(env.Client.Create(ctx, crd)).To(Succeed())
	t.Cleanup(func() {
		// The CRD's deletion holds the sequences too: the next test starts once the hold is over.
		_ = env.Client.Delete(context.Background(), crd)
		g.Eventually(func(g Gomega) {
			g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(crd), crd)).NotTo(Succeed())
			g.Expect(mgr.Wavegate.Members.HasSynced()).To(BeTrue())
			g.Consistently(mgr.Wavegate.Members.HasSynced).WithTimeout(time.Second).Should(BeTrue())
		}).WithTimeout(timeout).Should(Succeed())
	})
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd)).To(Succeed())
		established := false
		for _, c := range crd.Status.Conditions {
			established = established || c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
		}
		g.Expect(established).To(BeTrue())
	}).WithTimeout(timeout).Should(Succeed())

	// The templates: the web's pod first (as Helm orders kinds), the database's resource right
	// after it, as Helm applies them. The hold covers an apply that comes within 2 s of the CRD's
	// last change: waiting here (it watched the pod for half a second) made the test fail on a
	// slow day, the database coming after the hold had ended, when the web may go.
	web := barePod(t, ns, "web", member("web", 2))
	g.Expect(gated(g, web)).To(BeTrue(), "the web was released while the new kind was not tracked yet")
	db := &unstructured.Unstructured{}
	db.SetAPIVersion("newkind.example.com/v1")
	db.SetKind("Database")
	db.SetNamespace(ns)
	db.SetName("db")
	db.SetLabels(member("db", 1))
	g.Expect(env.Client.Create(ctx, db)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), db) })
	g.Eventually(groupPhase(ns, "db")).WithTimeout(timeout).ShouldNot(BeEmpty(), "the database's resource is not planned")
	g.Consistently(func(g Gomega) bool { return gated(g, web) }).WithTimeout(2*time.Second).Should(BeTrue(),
		"the web was released before the database was ready")
}
