package sequence

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

// TestStraySequencesAreDeleted: the object an earlier version named for a sequence (its own name,
// shaped like a hashed one) goes; the object ObjectName names for it stays.
func TestStraySequencesAreDeleted(t *testing.T) {
	s := testScheme(t)
	const seq = "team-0123abcd"
	own := &wavev1.Sequence{ObjectMeta: metav1.ObjectMeta{Name: ObjectName(seq), UID: "own"}, Spec: wavev1.SequenceSpec{Sequence: seq}}
	stray := &wavev1.Sequence{ObjectMeta: metav1.ObjectMeta{Name: seq, UID: "stray"}, Spec: wavev1.SequenceSpec{Sequence: seq}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(own, stray).Build()
	r := &StrayReconciler{Client: c}
	for _, o := range []*wavev1.Sequence{own, stray} {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(o)}); err != nil {
			t.Fatal(err)
		}
	}
	var left wavev1.SequenceList
	if err := c.List(context.Background(), &left); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range left.Items {
		names = append(names, o.Name)
	}
	if d := cmp.Diff([]string{ObjectName(seq)}, names); d != "" {
		t.Errorf("Sequences left (-want +got):\n%s", d)
	}
}

// testScheme is client-go's scheme with wavegate's API, for fake clients.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := wavev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}
