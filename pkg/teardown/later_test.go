package teardown

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

func TestLaterStore(t *testing.T) {
	seq := &wavev1.Sequence{Status: wavev1.SequenceStatus{Groups: []wavev1.GroupStatus{
		{Name: "operator", Order: 1, Members: 1, Resources: []string{"apps/v1/deployments"}},
		{Name: "instances", Order: 2, Members: 1, Terminating: 1, Resources: []string{"example.com/v1/widgets"}},
		{Name: "web", Order: 3, Members: 2, Resources: []string{"apps/v1/deployments", "v1/configmaps"}},
		{Name: "empty", Order: 4},
	}}}
	type later struct {
		Groups    []string
		Remaining int32
		Resources []string
		Complete  bool
	}
	s := &LaterStore{}
	s.Observe("shop", seq)
	s.Observe("old", &wavev1.Sequence{Status: wavev1.SequenceStatus{Groups: []wavev1.GroupStatus{
		{Name: "a", Order: 1, Members: 1}, {Name: "b", Order: 2, Members: 1}}}})
	cases := map[string]struct {
		seq   string
		order int32
		want  later
	}{
		"after the operator":         {"shop", 1, later{[]string{"instances", "web"}, 4, []string{"apps/v1/deployments", "example.com/v1/widgets", "v1/configmaps"}, true}},
		"after the last group":       {"shop", 3, later{nil, 0, nil, true}},
		"an unknown sequence":        {"other", 0, later{nil, 0, nil, true}},
		"a status without resources": {"old", 1, later{[]string{"b"}, 1, nil, false}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got later
			got.Groups, got.Remaining, got.Resources, got.Complete = s.Later(tc.seq, tc.order)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Later (-want,+got):\n%s", diff)
			}
		})
	}
	s.Observe("shop", nil)
	if g, n, _, _ := s.Later("shop", 0); len(g) != 0 || n != 0 {
		t.Errorf("a deleted Sequence still reports %v (%d)", g, n)
	}
}

func TestLaterStoreSpanning(t *testing.T) {
	groups := func(orders ...int32) *wavev1.Sequence {
		s := &wavev1.Sequence{}
		for _, o := range orders {
			s.Status.Groups = append(s.Status.Groups, wavev1.GroupStatus{Name: fmt.Sprint("g", o), Order: o, Members: 1})
		}
		return s
	}
	s := &LaterStore{}
	s.Observe("shop", groups(2, 1, 3))
	s.Observe("shop.db", groups(5, 4))
	s.Observe("shop.single", groups(1))
	s.Observe("shopping", groups(1, 2)) // another namespace, whose name starts alike
	s.Observe("platform", groups(1, 2)) // shared: not the namespace's own
	s.Observe("shop.emptied", &wavev1.Sequence{Status: wavev1.SequenceStatus{Groups: []wavev1.GroupStatus{
		{Name: "a", Order: 1, Members: 1}, {Name: "b", Order: 2}}}})
	want := []Span{{Sequence: "shop", Earliest: 1}, {Sequence: "shop.db", Earliest: 4}}
	if diff := cmp.Diff(want, s.Spanning("shop")); diff != "" {
		t.Errorf("Spanning(shop) (-want +got):\n%s", diff)
	}
	if got := s.Spanning("other"); got != nil {
		t.Errorf("Spanning(other) = %v, want none", got)
	}
}
