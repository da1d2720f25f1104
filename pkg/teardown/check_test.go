package teardown

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatafake "k8s.io/client-go/metadata/fake"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
)

// TestConfirmCountsObjectsWhoseGroupStopsResolving: the consistent read that confirms a refusal
// counts a later group's object whose labels do not resolve now at the place admission stamped on
// it, as the hold does; one with nothing stamped (never admitted as a member) is not counted, nor
// one of a namespace that may not join the sequence, whatever its annotations say.
func TestConfirmCountsObjectsWhoseGroupStopsResolving(t *testing.T) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	cm := func(namespace, name string, annotations map[string]string) runtime.Object {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
				Labels: map[string]string{keys.GroupLabel: "crs", keys.SequenceLabel: "shop"}, Annotations: annotations}}
	}
	stamp := map[string]string{keys.ResolvedSequenceAnnotation: "shop", keys.ResolvedGroupAnnotation: "crs", keys.ResolvedGroupOrderAnnotation: "2"}
	s := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(s); err != nil {
		t.Fatal(err)
	}
	// forged: another namespace's object naming the sequence with the same stamp, which its
	// namespace may not join.
	c := &Check{Metadata: metadatafake.NewSimpleMetadataClient(s,
		cm("shop", "stamped", stamp), cm("shop", "never-admitted", nil), cm("other", "forged", stamp))}
	groups, n, err := c.confirm(context.Background(), policy.Compile(nil), "shop", 1, []string{members.ResourceString(gvr)})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"crs"}, groups); d != "" || n != 1 {
		t.Errorf("later groups (-want +got):\n%s\nobjects %d, want 1", d, n)
	}
}
