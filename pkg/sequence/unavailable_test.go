package sequence

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

// TestUnavailableKinds: a sequence is not planned when its status records, for any group, a kind
// the tracker cannot see in full (whatever its version now); a sequence that records only other
// kinds is planned as usual, however broken the unavailable kind is.
func TestUnavailableKinds(t *testing.T) {
	widgets := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	const why = "listing example.com/v2/widgets fails (conversion webhook down): repair what serves it"
	tracker := func(resources []schema.GroupResource) map[schema.GroupResource]string {
		out := map[schema.GroupResource]string{}
		for _, gr := range resources {
			if gr == widgets {
				out[gr] = why
			}
		}
		return out
	}
	seq := func(groups ...wavev1.GroupStatus) *wavev1.Sequence {
		return &wavev1.Sequence{Status: wavev1.SequenceStatus{Groups: groups}}
	}
	cases := map[string]struct {
		prev *wavev1.Sequence
		want string
	}{
		"no Sequence yet":  {prev: &wavev1.Sequence{}},
		"only other kinds": {prev: seq(wavev1.GroupStatus{Name: "db", Resources: []string{"v1/configmaps", "apps/v1/statefulsets"}})},
		"the kind, recorded at another version": {
			prev: seq(wavev1.GroupStatus{Name: "operator", Resources: []string{"apps/v1/deployments"}},
				wavev1.GroupStatus{Name: "crs", Resources: []string{"example.com/v1/widgets", "v1/configmaps"}}),
			want: "wavegate cannot see every member of this sequence, so no group opens and no deleted member is released until it can: " +
				"widgets.example.com (group crs): " + why,
		},
		"the kind in two groups": {
			prev: seq(wavev1.GroupStatus{Name: "a", Resources: []string{"example.com/v2/widgets"}},
				wavev1.GroupStatus{Name: "b", Resources: []string{"example.com/v2/widgets"}}),
			want: "wavegate cannot see every member of this sequence, so no group opens and no deleted member is released until it can: " +
				"widgets.example.com (group a, b): " + why,
		},
		"an unreadable resource is left out": {prev: seq(wavev1.GroupStatus{Name: "db", Resources: []string{"widgets"}})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, unavailableKinds(tc.prev, tracker)); d != "" {
				t.Errorf("unavailableKinds (-want +got):\n%s", d)
			}
		})
	}
}
