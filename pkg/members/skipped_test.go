package members

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// TestWebhookSkipsWhatAdmissionSkips: the objects webhook's matchConditions
// (config/webhook/match-conditions-patch.yaml) name exactly the resources Skipped lists, so the API
// server does not call the webhook for objects admission would leave alone, and calls it for every
// other labeled object. Pods are the exception both ways: Skipped (not members), but gated when
// created, so only their UPDATEs are left out.
func TestWebhookSkipsWhatAdmissionSkips(t *testing.T) {
	conds := matchConditions(t, "../../config/webhook/match-conditions-patch.yaml")
	list := regexp.MustCompile(`in\s*\[([^\]]*)\]`).FindStringSubmatch(conds["not-derived"])
	if list == nil {
		t.Fatalf("matchCondition not-derived has no list: %q", conds["not-derived"])
	}
	var got []string
	for _, item := range strings.Split(list[1], ",") {
		got = append(got, strings.Trim(strings.TrimSpace(item), `"`))
	}
	var want []string
	for gr := range skipped {
		if gr.Group == "" && gr.Resource == "pods" {
			continue
		}
		want = append(want, gr.Group+"/"+gr.Resource)
	}
	slices.Sort(got)
	slices.Sort(want)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("matchCondition not-derived and Skipped differ (-Skipped +webhook):\n%s", d)
	}
	if pods := conds["not-a-pod-update"]; !strings.Contains(pods, `request.resource.resource == "pods"`) || !strings.Contains(pods, `request.operation == "UPDATE"`) {
		t.Errorf("matchCondition not-a-pod-update must leave out exactly pod UPDATEs: %q", pods)
	}
	// The teardown (DELETE) webhook skips the same resources, Secrets above all, and no pods: a pod's
	// deletion in a terminating namespace is what it holds.
	validating := matchConditions(t, "../../config/webhook/validating-match-conditions-patch.yaml")
	if d := cmp.Diff(map[string]string{"not-derived": conds["not-derived"]}, validating); d != "" {
		t.Errorf("the validating webhook's matchConditions differ from not-derived (-mutating +validating):\n%s", d)
	}
}

// matchConditions reads the conditions a kustomize patch adds to a webhook, by name.
func matchConditions(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ops []struct {
		Value []struct{ Name, Expression string }
	}
	if err := yaml.Unmarshal(b, &ops); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 {
		t.Fatalf("%s: want one patch operation, got %d", path, len(ops))
	}
	conds := map[string]string{}
	for _, c := range ops[0].Value {
		conds[c.Name] = c.Expression
	}
	return conds
}
