package rbac

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

// TestManagerUpdatesMatchesEveryChangeItRefuses: config/rbac's manager-updates policy has one match
// condition, which selects the manager's updates that break one of its checks, and the checks
// themselves as its validations, with their messages. The API server converts the old and the new
// object for CEL once per match condition evaluation, once for the validations and once for their
// messages, so a policy that matched every update by the manager and then validated it cost the
// API server three conversions of each pod whose gate it removes (0.19 s of CPU in a release of a
// hundred pods on the local cluster); matching only the refused updates costs one. The condition
// must then hold exactly the validations' checks: this test writes the conjunction of the
// validations, with their variables spelled out, and compares it with the condition's last term,
// so that a check added to the validations alone fails here instead of never being evaluated.
func TestManagerUpdatesMatchesEveryChangeItRefuses(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "manager_updates_policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	for doc := range bytes.SplitSeq(b, []byte("\n---\n")) {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := yaml.Unmarshal(doc, &p); err != nil {
			t.Fatal(err)
		}
		if p.Kind == "ValidatingAdmissionPolicy" {
			policy = p
		}
	}
	if len(policy.Spec.MatchConditions) != 1 {
		t.Fatalf("manager-updates has %d match conditions, want 1: every condition is evaluated on every update in the cluster, "+
			"where one stops at its first term, the manager's identity", len(policy.Spec.MatchConditions))
	}
	vars := map[string]string{}
	for _, v := range policy.Spec.Variables {
		vars[v.Name] = v.Expression
	}
	ref := regexp.MustCompile(`variables\.([A-Za-z]+)`)
	var spell func(string) string
	spell = func(expr string) string {
		return ref.ReplaceAllStringFunc(expr, func(m string) string {
			name := strings.TrimPrefix(m, "variables.")
			e, ok := vars[name]
			if !ok {
				t.Fatalf("variable %s is not declared", name)
			}
			return "(" + spell(e) + ")"
		})
	}
	checks := make([]string, len(policy.Spec.Validations))
	for i, v := range policy.Spec.Validations {
		checks[i] = "(" + spell(v.Expression) + ")"
	}
	spelled := "!(" + strings.Join(checks, " &&\n") + ")"
	want := normalize(spelled)
	got := normalize(policy.Spec.MatchConditions[0].Expression)
	if !strings.HasSuffix(got, normalize("&& ")+want) {
		t.Errorf("the match condition %s does not end with the validations' checks, negated:\n&& %s", policy.Spec.MatchConditions[0].Name, spelled)
	}
	if strings.Contains(got, "variables.") {
		t.Errorf("a match condition cannot read variables: %s", got)
	}
}

// normalize leaves out the whitespace, which CEL ignores between tokens, so that the condition may
// be laid out for reading.
func normalize(expr string) string { return strings.Join(strings.Fields(expr), "") }
