package resolve

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/policy"
)

func policies(ps ...wavev1.WavePolicy) *policy.Index { return policy.Compile(ps) }

func wp(name string, spec wavev1.WavePolicySpec) wavev1.WavePolicy {
	return wavev1.WavePolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

func TestResolve(t *testing.T) {
	shop := policies(wp("shop", wavev1.WavePolicySpec{
		GroupLabel: "app.kubernetes.io/component",
		Groups:     []wavev1.GroupSpec{{Name: "database", Order: 1}, {Name: "web", Order: 3}},
	}))
	strict := policies(wp("strict", wavev1.WavePolicySpec{
		RequireKnownGroups: true,
		Groups:             []wavev1.GroupSpec{{Name: "database", Order: 1}},
	}))
	strictByComponent := policies(wp("strict", wavev1.WavePolicySpec{
		GroupLabel:         "app.kubernetes.io/component",
		RequireKnownGroups: true,
		Groups:             []wavev1.GroupSpec{{Name: "database", Order: 1}},
	}))
	conflicting := policies(
		wp("a", wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: "database", Order: 1}}}),
		wp("b", wavev1.WavePolicySpec{Groups: []wavev1.GroupSpec{{Name: "database", Order: 2}}}),
	)
	shared := policies(wp("platform", wavev1.WavePolicySpec{Sequences: []wavev1.SharedSequence{
		{Name: "platform", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "platform"}}, ClusterScoped: true},
		{Name: "apps-only", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "platform"}}},
	}}))
	perTeam := policies(
		wp("team-a", wavev1.WavePolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
			Groups: []wavev1.GroupSpec{{Name: "web", Order: 5}}}),
		wp("team-b", wavev1.WavePolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"b"}}}},
			Groups: []wavev1.GroupSpec{{Name: "web", Order: 9}}}),
		wp("team-b-too", wavev1.WavePolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"also": "b"}},
			Groups: []wavev1.GroupSpec{{Name: "web", Order: 9}}}),
	)
	cases := map[string]struct {
		obj     Object
		idx     *policy.Index
		want    *Resolution
		wantErr string // substring of the aggregated error; "" means no error
	}{
		"not a member": {
			obj: Object{Namespace: "shop", Labels: map[string]string{"app": "x"}},
		},
		"order from the group-order label": {
			obj:  Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "2", keys.OrderLabel: "7"}},
			want: &Resolution{Sequence: "shop", Group: "db", GroupOrder: 2, Order: 7, Wave: 207, GroupLabel: keys.GroupLabel},
		},
		"negative group order": {
			obj:  Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "crds", keys.GroupOrderLabel: "-1"}},
			want: &Resolution{Sequence: "shop", Group: "crds", GroupOrder: -1, Wave: -100, GroupLabel: keys.GroupLabel},
		},
		"order from a policy through its group label": {
			obj:  Object{Namespace: "shop", Labels: map[string]string{"app.kubernetes.io/component": "web"}},
			idx:  shop,
			want: &Resolution{Sequence: "shop", Group: "web", GroupOrder: 3, Wave: 300, GroupLabel: "app.kubernetes.io/component"},
		},
		"wavegate.io/group wins over the policy's group label": {
			obj:  Object{Namespace: "shop", Labels: map[string]string{"app.kubernetes.io/component": "web", keys.GroupLabel: "database"}},
			idx:  shop,
			want: &Resolution{Sequence: "shop", Group: "database", GroupOrder: 1, Wave: 100, GroupLabel: keys.GroupLabel},
		},
		"label agreeing with the policy": {
			obj:  Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "database", keys.GroupOrderLabel: "1"}},
			idx:  shop,
			want: &Resolution{Sequence: "shop", Group: "database", GroupOrder: 1, Wave: 100, GroupLabel: keys.GroupLabel},
		},
		"an independent sequence of the namespace": {
			obj:  Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "1", keys.SequenceLabel: "shop.gpu"}},
			want: &Resolution{Sequence: "shop.gpu", Group: "db", GroupOrder: 1, Wave: 100, GroupLabel: keys.GroupLabel},
		},
		"the namespace's own sequence named explicitly": {
			obj:  Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "1", keys.SequenceLabel: "shop"}},
			want: &Resolution{Sequence: "shop", Group: "db", GroupOrder: 1, Wave: 100, GroupLabel: keys.GroupLabel},
		},
		"capture: another namespace's sequence": {
			obj:     Object{Namespace: "tenant", Labels: map[string]string{keys.GroupLabel: "zzz", keys.GroupOrderLabel: "0", keys.SequenceLabel: "victim"}},
			wantErr: "metadata.labels[wavegate.io/sequence]: Forbidden: namespace tenant may join only its own sequences (tenant, or tenant.<name>)",
		},
		"capture: a prefix is not a namespace": {
			obj:     Object{Namespace: "vic", Labels: map[string]string{keys.GroupLabel: "zzz", keys.GroupOrderLabel: "0", keys.SequenceLabel: "victim"}},
			wantErr: "Forbidden: namespace vic may join only its own sequences",
		},
		"capture: another namespace's independent sequence": {
			obj:     Object{Namespace: "tenant", Labels: map[string]string{keys.GroupLabel: "zzz", keys.GroupOrderLabel: "0", keys.SequenceLabel: "victim.gpu"}},
			wantErr: "Forbidden: namespace tenant may join only its own sequences",
		},
		"a declared shared sequence, namespace selected": {
			obj: Object{Namespace: "apps", NamespaceLabels: map[string]string{"team": "platform"},
				Labels: map[string]string{keys.GroupLabel: "web", keys.GroupOrderLabel: "2", keys.SequenceLabel: "platform"}},
			idx:  shared,
			want: &Resolution{Sequence: "platform", Group: "web", GroupOrder: 2, Wave: 200, GroupLabel: keys.GroupLabel},
		},
		"a declared shared sequence, namespace not selected": {
			obj: Object{Namespace: "tenant", NamespaceLabels: map[string]string{"team": "other"},
				Labels: map[string]string{keys.GroupLabel: "web", keys.GroupOrderLabel: "2", keys.SequenceLabel: "platform"}},
			idx:     shared,
			wantErr: "a WavePolicy's spec.sequences entry {name: platform} whose namespaceSelector selects namespace tenant",
		},
		"cluster-scoped object joining a declared sequence": {
			obj:  Object{Labels: map[string]string{keys.GroupLabel: "crds", keys.GroupOrderLabel: "0", keys.SequenceLabel: "platform"}},
			idx:  shared,
			want: &Resolution{Sequence: "platform", Group: "crds", GroupLabel: keys.GroupLabel},
		},
		"cluster-scoped object joining a namespace's sequence nobody declared": {
			obj:     Object{Labels: map[string]string{keys.GroupLabel: "crds", keys.GroupOrderLabel: "0", keys.SequenceLabel: "victim"}},
			wantErr: "a cluster-scoped object may join only a sequence that a WavePolicy declares for cluster-scoped members",
		},
		"cluster-scoped object joining a sequence declared for namespaces only": {
			obj:     Object{Labels: map[string]string{keys.GroupLabel: "crds", keys.GroupOrderLabel: "0", keys.SequenceLabel: "apps-only"}},
			idx:     shared,
			wantErr: "add {name: apps-only, clusterScoped: true}",
		},
		"a policy applies only to the namespaces it selects": {
			obj:  Object{Namespace: "team-a", NamespaceLabels: map[string]string{"team": "a"}, Labels: map[string]string{keys.GroupLabel: "web"}},
			idx:  perTeam,
			want: &Resolution{Sequence: "team-a", Group: "web", GroupOrder: 5, Wave: 500, GroupLabel: keys.GroupLabel},
		},
		"another team, another order for the same group": {
			obj:  Object{Namespace: "team-b", NamespaceLabels: map[string]string{"team": "b"}, Labels: map[string]string{keys.GroupLabel: "web"}},
			idx:  perTeam,
			want: &Resolution{Sequence: "team-b", Group: "web", GroupOrder: 9, Wave: 900, GroupLabel: keys.GroupLabel},
		},
		"a namespace no policy selects": {
			obj:     Object{Namespace: "team-c", NamespaceLabels: map[string]string{"team": "c"}, Labels: map[string]string{keys.GroupLabel: "web"}},
			idx:     perTeam,
			wantErr: `group "web" has no order`,
		},
		"policies selecting the same namespace conflict": {
			obj:     Object{Namespace: "both", NamespaceLabels: map[string]string{"team": "a", "also": "b"}, Labels: map[string]string{keys.GroupLabel: "web"}},
			idx:     perTeam,
			wantErr: `WavePolicies "team-a" and "team-b-too" define group "web" with orders 5 and 9`,
		},
		"cluster-scoped object without a sequence": {
			obj:     Object{Labels: map[string]string{keys.GroupLabel: "crds", keys.GroupOrderLabel: "0"}},
			wantErr: "metadata.labels[wavegate.io/sequence]: Required value: a cluster-scoped object must name the sequence",
		},
		"cluster-scoped object with a policy's group label, no sequence: not a member": {
			obj: Object{Labels: map[string]string{"app.kubernetes.io/component": "web"}},
			idx: shop,
		},
		"cluster-scoped object with a policy's group label joining a declared sequence": {
			obj: Object{Labels: map[string]string{"app.kubernetes.io/component": "web", keys.SequenceLabel: "platform"}},
			idx: policies(wp("platform", wavev1.WavePolicySpec{GroupLabel: "app.kubernetes.io/component",
				Groups:    []wavev1.GroupSpec{{Name: "web", Order: 3}},
				Sequences: []wavev1.SharedSequence{{Name: "platform", ClusterScoped: true}}})),
			want: &Resolution{Sequence: "platform", Group: "web", GroupOrder: 3, Wave: 300, GroupLabel: "app.kubernetes.io/component"},
		},
		"non-integer order": {
			obj:     Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "1", keys.OrderLabel: "first"}},
			wantErr: `metadata.labels[wavegate.io/order]: Invalid value: "first": must be an integer from 0 to 49`,
		},
		"order out of range": {
			obj:     Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "1", keys.OrderLabel: "50"}},
			wantErr: `metadata.labels[wavegate.io/order]: Invalid value: "50": must be an integer from 0 to 49`,
		},
		"group order out of range": {
			obj:     Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "99999999999"}},
			wantErr: `metadata.labels[wavegate.io/group-order]: Invalid value: "99999999999": must be an integer from -1000 to 1000`,
		},
		"group without an order": {
			obj:     Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "db"}},
			wantErr: `metadata.labels[wavegate.io/group-order]: Required value: group "db" has no order: add it to a WavePolicy or set the label`,
		},
		"empty group": {
			obj:     Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "", keys.GroupOrderLabel: "1"}},
			wantErr: "metadata.labels[wavegate.io/group]: Required value: the group must not be empty",
		},
		"group that is not a label value": {
			obj:     Object{Namespace: "shop", Labels: map[string]string{"app.kubernetes.io/component": "-bad-", keys.GroupOrderLabel: "1"}},
			idx:     shop,
			wantErr: `metadata.labels[app.kubernetes.io/component]: Invalid value: "-bad-": a group must be a valid label value`,
		},
		"unknown group under a policy requiring known groups": {
			obj:     Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "cache", keys.GroupOrderLabel: "2"}},
			idx:     strict,
			wantErr: `metadata.labels[wavegate.io/group]: Invalid value: "cache": WavePolicy strict requires known groups: use one of database, or ask a platform team to add the group`,
		},
		"unknown group from a policy's group label": {
			obj:     Object{Namespace: "shop", Labels: map[string]string{"app.kubernetes.io/component": "cache"}},
			idx:     strictByComponent,
			wantErr: `metadata.labels[app.kubernetes.io/component]: Invalid value: "cache": WavePolicy strict requires known groups`,
		},
		"label conflicting with the policy": {
			obj:     Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "database", keys.GroupOrderLabel: "2"}},
			idx:     shop,
			wantErr: `metadata.labels[wavegate.io/group-order]: Invalid value: "2": WavePolicy "shop" gives group "database" order 1: remove the label or make it 1`,
		},
		"policies conflicting with each other": {
			obj:     Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "database"}},
			idx:     conflicting,
			wantErr: `WavePolicies "a" and "b" define group "database" with orders 1 and 2: make the policies agree`,
		},
		"empty sequence": {
			obj:     Object{Namespace: "shop", Labels: map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "1", keys.SequenceLabel: ""}},
			wantErr: "metadata.labels[wavegate.io/sequence]: Required value: the sequence must not be empty",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, errs := Resolve(tc.obj, tc.idx)
			if tc.wantErr != "" {
				if errs == nil || !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
					t.Fatalf("Resolve() errors = %v, want one containing %q", errs, tc.wantErr)
				}
				if got != nil {
					t.Errorf("Resolve() = %+v along with errors, want nil", got)
				}
				return
			}
			if errs != nil {
				t.Fatalf("Resolve() unexpected errors: %v", errs)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Resolution{}, "Policy")); diff != "" {
				t.Errorf("Resolve() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestPolicySettingsReachTheResolution(t *testing.T) {
	timeout := metav1.Duration{Duration: 90e9}
	idx := policies(wp("p", wavev1.WavePolicySpec{
		Defaults: wavev1.GroupDefaults{OnTimeout: wavev1.OnTimeoutRelease, Timeout: &timeout},
		Groups:   []wavev1.GroupSpec{{Name: "db", Order: 1, Required: true, Teardown: wavev1.TeardownDisabled}},
	}))
	got, errs := Resolve(Object{Namespace: "ns", Labels: map[string]string{keys.GroupLabel: "db"}}, idx)
	if errs != nil {
		t.Fatal(errs)
	}
	want := &policy.Group{Name: "db", Order: 1, Required: true, Timeout: timeout.Duration,
		OnTimeout: wavev1.OnTimeoutRelease, Teardown: wavev1.TeardownDisabled, Policy: "p"}
	if diff := cmp.Diff(want, got.Policy); diff != "" {
		t.Errorf("policy group (-want,+got):\n%s", diff)
	}
}

func TestTemplateLabelsAndAnnotations(t *testing.T) {
	res := &Resolution{Sequence: "gpu", Group: "web", GroupOrder: 3, Order: 2, Wave: 302}
	labels := map[string]string{"app.kubernetes.io/component": "web", keys.SequenceLabel: "gpu", keys.OrderLabel: "2"}
	if diff := cmp.Diff(map[string]string{keys.GroupLabel: "web", keys.SequenceLabel: "gpu"}, TemplateLabels(res, labels)); diff != "" {
		t.Errorf("TemplateLabels (-want,+got):\n%s", diff)
	}
	want := map[string]string{
		keys.ResolvedSequenceAnnotation: "gpu", keys.ResolvedGroupAnnotation: "web",
		keys.ResolvedGroupOrderAnnotation: "3", keys.ResolvedWaveAnnotation: "302",
	}
	if diff := cmp.Diff(want, Annotations(res)); diff != "" {
		t.Errorf("Annotations (-want,+got):\n%s", diff)
	}
	if got := WaitJobWave(3); got != 350 {
		t.Errorf("WaitJobWave(3) = %d, want 350", got)
	}
}
