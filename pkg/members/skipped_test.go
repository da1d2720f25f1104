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
	b, err := os.ReadFile("../../config/webhook/match-conditions-patch.yaml")
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
		t.Fatalf("want one patch operation, got %d", len(ops))
	}
	conds := map[string]string{}
	for _, c := range ops[0].Value {
		conds[c.Name] = c.Expression
	}
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
}
