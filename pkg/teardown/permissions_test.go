package teardown

import (
	"context"
	"testing"

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
