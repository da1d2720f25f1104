package teardown

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestPermissionsIgnoreNamedGrants: a grant limited to named objects (the manager may patch its
// own webhook configurations) does not let admission put a finalizer on every object of that
// kind: the manager could not remove it from a user's.
func TestPermissionsIgnoreNamedGrants(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("create", "selfsubjectrulesreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authorizationv1.SelfSubjectRulesReview{Status: authorizationv1.SubjectRulesReviewStatus{
			ResourceRules: []authorizationv1.ResourceRule{
				{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"},
					Verbs: []string{"patch", "update"}, ResourceNames: []string{"wavegate-mutating-webhook-configuration"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "patch"}},
			}}}, nil
	})
	p := &Permissions{Client: c}
	if err := p.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		group, resource string
		want            bool
	}{
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", false},
		{"", "configmaps", true},
		{"", "secrets", false},
	} {
		if got := p.CanPatch(tc.group, tc.resource); got != tc.want {
			t.Errorf("CanPatch(%q, %q) = %v, want %v", tc.group, tc.resource, got, tc.want)
		}
	}
}

// TestPermissionsTellUnknownFromRefused: before the first review nothing is allowed and Ready says
// that nothing is known (admission then adds no finalizer and warns about no kind); after it,
// CanWatch needs list and watch, and CanPatch patch, on every object of the kind.
func TestPermissionsTellUnknownFromRefused(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("create", "selfsubjectrulesreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authorizationv1.SelfSubjectRulesReview{Status: authorizationv1.SubjectRulesReviewStatus{
			ResourceRules: []authorizationv1.ResourceRule{
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "patch"}},
				{APIGroups: []string{"autoscaling"}, Resources: []string{"horizontalpodautoscalers"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: []string{"get", "list", "patch"}},
				{APIGroups: []string{"example.com"}, Resources: []string{"gadgets"}, Verbs: []string{"list", "watch"}, ResourceNames: []string{"one"}},
			}}}, nil
	})
	type answer struct{ Ready, CanWatch, CanPatch bool }
	ask := func(p *Permissions, group, resource string) answer {
		return answer{p.Ready(), p.CanWatch(group, resource), p.CanPatch(group, resource)}
	}
	var none *Permissions
	if diff := cmp.Diff(answer{}, ask(none, "", "configmaps")); diff != "" {
		t.Errorf("nil permissions (-want,+got):\n%s", diff)
	}
	p := &Permissions{Client: c}
	if diff := cmp.Diff(answer{}, ask(p, "", "configmaps")); diff != "" {
		t.Errorf("before the first review (-want,+got):\n%s", diff)
	}
	if err := p.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		group, resource string
		want            answer
	}{
		{"", "configmaps", answer{Ready: true, CanWatch: true, CanPatch: true}},
		{"autoscaling", "horizontalpodautoscalers", answer{Ready: true, CanWatch: true}},
		{"example.com", "widgets", answer{Ready: true, CanPatch: true}},
		{"example.com", "gadgets", answer{Ready: true}},
		{"apiregistration.k8s.io", "apiservices", answer{Ready: true}},
	} {
		if diff := cmp.Diff(tc.want, ask(p, tc.group, tc.resource)); diff != "" {
			t.Errorf("%s.%s (-want,+got):\n%s", tc.resource, tc.group, diff)
		}
	}
}
