package rbac

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/test/framework"
)

// TestNamespaceTeardownEntryFollowsTheBase: the DELETE check's second entry (the namespace
// controller's deletions of objects in no group, config/webhook/namespace-teardown-patch.yaml)
// repeats the base entry's namespace scope and endpoint: in every install they must stay the same,
// and the entries must split objects by the group label, so that each DELETE reaches one of them.
func TestNamespaceTeardownEntryFollowsTheBase(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, install := range []string{"default", "self-managed", "dev", "dev-certmanager"} {
		t.Run(install, func(t *testing.T) {
			_, validating, err := framework.RenderWebhooks(filepath.Join(root, "config", install))
			if err != nil {
				t.Fatal(err)
			}
			if len(validating) != 1 {
				t.Fatalf("%d ValidatingWebhookConfigurations, want 1", len(validating))
			}
			byName := map[string]admissionregistrationv1.ValidatingWebhook{}
			for _, w := range validating[0].Webhooks {
				byName[w.Name] = w
			}
			base, ok := byName["teardown.wavegate.io"]
			second, ok2 := byName["namespace-teardown.wavegate.io"]
			if !ok || !ok2 {
				t.Fatalf("entries %v, want teardown.wavegate.io and namespace-teardown.wavegate.io", validating[0].Webhooks)
			}
			if diff := cmp.Diff(base.NamespaceSelector, second.NamespaceSelector); diff != "" {
				t.Errorf("namespaceSelector differs (-base +namespace-teardown):\n%s", diff)
			}
			if diff := cmp.Diff(base.ClientConfig, second.ClientConfig); diff != "" {
				t.Errorf("clientConfig differs (-base +namespace-teardown):\n%s", diff)
			}
			op := func(w admissionregistrationv1.ValidatingWebhook, key string) string {
				for _, e := range w.ObjectSelector.MatchExpressions {
					if e.Key == key {
						return string(e.Operator)
					}
				}
				return ""
			}
			if op(base, keys.GroupLabel) != "Exists" || op(second, keys.GroupLabel) != "DoesNotExist" {
				t.Errorf("the entries do not split objects by %s: base %q, namespace-teardown %q", keys.GroupLabel, op(base, keys.GroupLabel), op(second, keys.GroupLabel))
			}
			if op(second, keys.WaitJobLabel) != "DoesNotExist" {
				t.Errorf("namespace-teardown reaches wait Jobs")
			}
			// The third: the namespace controller's deletions of EndpointSlices and Endpoints, whatever
			// their labels (they copy their Service's, and the entries above leave them out).
			endpoints, ok := byName["namespace-endpoints.wavegate.io"]
			if !ok {
				t.Fatalf("no entry namespace-endpoints.wavegate.io")
			}
			if diff := cmp.Diff(base.NamespaceSelector, endpoints.NamespaceSelector); diff != "" {
				t.Errorf("namespaceSelector differs (-base +namespace-endpoints):\n%s", diff)
			}
			if diff := cmp.Diff(base.ClientConfig, endpoints.ClientConfig); diff != "" {
				t.Errorf("clientConfig differs (-base +namespace-endpoints):\n%s", diff)
			}
		})
	}
}
