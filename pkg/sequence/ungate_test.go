package sequence

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
)

// TestUngateReleasesPodsOfTheConsistentRead: the pods the opener's consistent read found, and the
// cache had not seen yet, are released in the same pass when their group is open (a ReplicaSet
// creates its pods over a second; each left to a later reconcile paid another consistent read),
// and only then: those of a closed group stay gated, and so does a pod the read did not find.
func TestUngateReleasesPodsOfTheConsistentRead(t *testing.T) {
	pod := func(name, group string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID(name),
				Labels: map[string]string{keys.GroupLabel: group}},
			Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: keys.SchedulingGate}}},
		}
	}
	cached := pod("cached", "web")
	late, lateClosed, unread := pod("late", "web"), pod("late-closed", "db"), pod("unread", "web")
	byPodSequence := func(o client.Object) []string { return []string{members.SequenceOf(o)} }
	cache := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithIndex(&corev1.Pod{}, PodSequenceIndex, byPodSequence).
		WithObjects(cached.DeepCopy()).Build()
	// The API server: every pod, the one created after the consistent read too.
	api := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(cached, late, lateClosed, unread).Build()
	// The reconciler's client lists from the cache (it has not seen the late pods) and patches the
	// API server.
	r := &Reconciler{Client: &listFrom{Client: api, lister: cache}, APIReader: api}

	fresh := &freshView{r: r, seq: "shop"}
	plan := []*Group{{Name: "web", Open: true}, {Name: "db"}}
	gate := newOpener(plan, func() (map[string]bool, error) {
		for _, p := range []*corev1.Pod{cached, late, lateClosed} { // not "unread": created after the read
			fresh.pods = append(fresh.pods, metav1.PartialObjectMetadata{ObjectMeta: p.ObjectMeta})
		}
		return map[string]bool{"web": true}, nil
	})
	if _, err := r.ungate(context.Background(), "shop", gate, fresh); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range []*corev1.Pod{cached, late, lateClosed, unread} {
		cur := &corev1.Pod{}
		if err := api.Get(context.Background(), client.ObjectKeyFromObject(p), cur); err != nil {
			t.Fatal(err)
		}
		got[p.Name] = hasGate(cur)
	}
	want := map[string]bool{"cached": false, "late": false, "late-closed": true, "unread": true}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("gated (-want +got):\n%s", d)
	}
}

// listFrom lists from a lagging cache and does everything else on the API server.
type listFrom struct {
	client.Client
	lister client.Reader
}

func (l *listFrom) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return l.lister.List(ctx, list, opts...)
}
