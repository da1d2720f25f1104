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
// and only then: those of a closed group stay gated, and so do a pod the read did not find and a
// pod of another sequence in the namespace.
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
	other := pod("other-sequence", "web")
	other.Labels[keys.SequenceLabel] = "shop.other"
	byPodSequence := func(o client.Object) []string { return []string{members.SequenceOf(o)} }
	cache := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithIndex(&corev1.Pod{}, PodSequenceIndex, byPodSequence).
		WithObjects(cached.DeepCopy()).Build()
	// The API server: the cache's pod and those created since ("unread" comes after the read).
	api := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(cached, late, lateClosed, other).Build()
	// The reconciler's client lists from the cache (it has not seen the late pods) and patches the
	// API server.
	r := &Reconciler{Client: &listFrom{Client: api, lister: cache}, APIReader: api}

	ctx := context.Background()
	fresh := &freshView{r: r, seq: "shop"}
	plan := []*Group{{Name: "web", Open: true}, {Name: "db"}}
	// The consistent read: the members' plan is given, the pods are read as freshView.plan reads them.
	gate := newOpener(plan, func() (map[string]bool, error) {
		if !fresh.withPods {
			t.Error("the consistent read made for ungating lists no pods")
		}
		if err := fresh.listPods(ctx, "shop"); err != nil {
			return nil, err
		}
		if err := api.Create(ctx, unread); err != nil {
			return nil, err
		}
		return map[string]bool{"web": true}, nil
	})
	if _, err := r.ungate(ctx, "shop", gate, fresh); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range []*corev1.Pod{cached, late, lateClosed, unread, other} {
		cur := &corev1.Pod{}
		if err := api.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
			t.Fatal(err)
		}
		got[p.Name] = hasGate(cur)
	}
	want := map[string]bool{"cached": false, "late": false, "late-closed": true, "unread": true, "other-sequence": true}
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
