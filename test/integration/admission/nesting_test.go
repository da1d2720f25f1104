package admission

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/test/framework"
)

// TestDeeplyNestedObjectsAreAdmitted: the API server stores custom resources nested far deeper
// than the 300 levels wavegate's JSON parser reads at most (a schemaless configuration tree, say).
// Such a member, created in an opted-in namespace, is admitted and stamped like any other: wavegate
// reads only its metadata and pod templates, and the nesting below those is not its business.
// Before, the webhook denied it as "not JSON", and the object could not be created at all.
func TestDeeplyNestedObjectsAreAdmitted(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	crd := framework.SchemalessCRD(schema.GroupVersionResource{Group: "nesting.example.com", Version: "v1", Resource: "trees"}, "Tree", apiextensionsv1.NamespaceScoped)
	g.Expect(env.Client.Create(ctx, crd)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crd) })
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("nesting.example.com/v1")
	list.SetKind("TreeList")
	g.Eventually(func() error { return env.Client.List(ctx, list) }).WithTimeout(30 * time.Second).Should(Succeed())

	ns := namespace(t, true)
	for _, depth := range []int{50, 500} {
		leaf := map[string]any{"value": "leaf"}
		for range depth {
			leaf = map[string]any{"child": leaf, "list": []any{"x"}}
		}
		tree := &unstructured.Unstructured{Object: map[string]any{"spec": leaf}}
		tree.SetAPIVersion("nesting.example.com/v1")
		tree.SetKind("Tree")
		tree.SetNamespace(ns)
		tree.SetName("depth-" + string(rune('a'+depth%26)))
		tree.SetLabels(labels(keys.GroupLabel, "config", keys.GroupOrderLabel, "1"))
		g.Expect(env.Client.Create(ctx, tree)).To(Succeed(), "a Tree nested %d deep", depth)
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(tree.GroupVersionKind())
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tree), got)).To(Succeed())
		g.Expect(got).To(haveAnnotations(resolvedAnnotations(ns, "config", "1", "100")), "a Tree nested %d deep", depth)
		stored, _, _ := unstructured.NestedFieldNoCopy(got.Object, "spec")
		g.Expect(stored).To(Equal(leaf), "the nesting is stored as sent")
	}
}
