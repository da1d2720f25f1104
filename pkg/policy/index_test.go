package policy

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

func TestShared(t *testing.T) {
	idx := Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "platform"}, Spec: wavev1.WavePolicySpec{
		Sequences: []wavev1.SharedSequence{
			{Name: "platform", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "platform"}}},
			{Name: "crds", ClusterScoped: true},
		}}}})
	cases := map[string]struct {
		idx  *Index
		seq  string
		want bool
	}{
		"declared for namespaces":     {idx, "platform", true},
		"declared for cluster scope":  {idx, "crds", true},
		"a namespace's own sequence":  {idx, "shop", false},
		"a namespace's named one":     {idx, "shop.db", false},
		"no policies":                 {Compile(nil), "platform", false},
		"no index (policies not yet)": {nil, "platform", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.idx.Shared(tc.seq); got != tc.want {
				t.Errorf("Shared(%q) = %v, want %v", tc.seq, got, tc.want)
			}
		})
	}
}

func TestClusterScoped(t *testing.T) {
	idx := Compile([]wavev1.WavePolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "platform"}, Spec: wavev1.WavePolicySpec{Sequences: []wavev1.SharedSequence{
			{Name: "platform", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "platform"}}},
			{Name: "gpu", ClusterScoped: true},
		}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: wavev1.WavePolicySpec{Sequences: []wavev1.SharedSequence{
			{Name: "platform"}, // a second declaration without clusterScoped changes nothing
		}}},
	})
	cases := map[string]struct {
		idx  *Index
		seq  string
		want bool
	}{
		"declared clusterScoped":            {idx, "gpu", true},
		"shared among namespaces only":      {idx, "platform", false},
		"a namespace's own sequence":        {idx, "gpu-operator", false},
		"a namespace's own, named like one": {idx, "gpu.x", false},
		"no policies":                       {Compile(nil), "gpu", false},
		"no index (policies not yet)":       {nil, "gpu", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.idx.ClusterScoped(tc.seq); got != tc.want {
				t.Errorf("ClusterScoped(%q) = %v, want %v", tc.seq, got, tc.want)
			}
		})
	}
}

// TestTimeoutUnderASecondIsTheDefault: the CRD refuses a timeout under a second; one stored before
// it did would have given the group's wait Job a one-second deadline.
func TestTimeoutUnderASecondIsTheDefault(t *testing.T) {
	idx := Compile([]wavev1.WavePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: wavev1.WavePolicySpec{
		Defaults: wavev1.GroupDefaults{Timeout: &metav1.Duration{}},
		Groups: []wavev1.GroupSpec{
			{Name: "zero", Order: 1},
			{Name: "negative", Order: 2, Timeout: &metav1.Duration{Duration: -time.Minute}},
			{Name: "set", Order: 3, Timeout: &metav1.Duration{Duration: time.Minute}},
		}}}})
	for name, want := range map[string]time.Duration{"zero": DefaultTimeout, "negative": DefaultTimeout, "set": time.Minute} {
		g, ok := idx.Group(name)
		if !ok || g.Timeout != want {
			t.Errorf("group %s: timeout %v (found %v), want %v", name, g.Timeout, ok, want)
		}
	}
}

// TestInvalidGroupLabelIsLeftOut: a groupLabel that is not a label key (stored before the CRD
// refused it) is in no index: a selector on it would not parse, and the tracker, uninstall and
// status select by the index's group labels.
func TestInvalidGroupLabelIsLeftOut(t *testing.T) {
	idx := Compile([]wavev1.WavePolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: wavev1.WavePolicySpec{GroupLabel: "app component"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "good"}, Spec: wavev1.WavePolicySpec{GroupLabel: "app.kubernetes.io/component"}},
	})
	want := []string{"wavegate.io/group", "app.kubernetes.io/component"}
	for name, got := range map[string][]string{"root": idx.GroupLabels(), "namespace view": idx.For("shop", nil, "shop").GroupLabels()} {
		if !slices.Equal(got, want) {
			t.Errorf("%s: group labels %v, want %v", name, got, want)
		}
	}
	if InvalidGroupLabel("app component") == "" || InvalidGroupLabel("app.kubernetes.io/component") != "" {
		t.Error("InvalidGroupLabel does not tell a label key")
	}
}
