package webhookconfig

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWebhooks(t *testing.T) {
	base := admissionregistrationv1.MutatingWebhook{Name: BaseWebhookName,
		ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"wavegate.io/group": "x"}}}
	other := admissionregistrationv1.MutatingWebhook{Name: "pods.wavegate.io"}
	stale := admissionregistrationv1.MutatingWebhook{Name: EntryName("old")}
	entry := func(l string) admissionregistrationv1.MutatingWebhook {
		w := *base.DeepCopy()
		w.Name = EntryName(l)
		w.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: l, Operator: metav1.LabelSelectorOpExists},
			{Key: "wavegate.io/group", Operator: metav1.LabelSelectorOpDoesNotExist},
			{Key: "wavegate.io/wait-job", Operator: metav1.LabelSelectorOpDoesNotExist},
		}}
		w.MatchConditions = append(w.MatchConditions, namesItsSequenceIfClusterScoped)
		return w
	}
	cases := map[string]struct {
		current []admissionregistrationv1.MutatingWebhook
		labels  []string
		want    []admissionregistrationv1.MutatingWebhook
	}{
		"no labels":            {current: []admissionregistrationv1.MutatingWebhook{base, other}, want: []admissionregistrationv1.MutatingWebhook{base, other}},
		"stale entries go":     {current: []admissionregistrationv1.MutatingWebhook{base, stale}, want: []admissionregistrationv1.MutatingWebhook{base}},
		"sorted and deduped":   {current: []admissionregistrationv1.MutatingWebhook{base}, labels: []string{"b", "a", "b"}, want: []admissionregistrationv1.MutatingWebhook{base, entry("a"), entry("b")}},
		"idempotent over self": {current: []admissionregistrationv1.MutatingWebhook{base, entry("a")}, labels: []string{"a"}, want: []admissionregistrationv1.MutatingWebhook{base, entry("a")}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Webhooks(tc.current, tc.labels)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
	if _, err := Webhooks([]admissionregistrationv1.MutatingWebhook{other}, nil); err == nil {
		t.Error("a configuration without the base entry must be an error")
	}
}

func TestValidatingWebhooks(t *testing.T) {
	base := admissionregistrationv1.ValidatingWebhook{Name: BaseValidatingWebhookName}
	got, err := ValidatingWebhooks([]admissionregistrationv1.ValidatingWebhook{base, {Name: EntryName("stale")}}, []string{"app.kubernetes.io/component"})
	if err != nil {
		t.Fatal(err)
	}
	want := *base.DeepCopy()
	want.Name = EntryName("app.kubernetes.io/component")
	want.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "app.kubernetes.io/component", Operator: metav1.LabelSelectorOpExists},
		{Key: "wavegate.io/group", Operator: metav1.LabelSelectorOpDoesNotExist},
		{Key: "wavegate.io/wait-job", Operator: metav1.LabelSelectorOpDoesNotExist},
	}}
	want.MatchConditions = []admissionregistrationv1.MatchCondition{namesItsSequenceIfClusterScoped}
	if diff := cmp.Diff([]admissionregistrationv1.ValidatingWebhook{base, want}, got); diff != "" {
		t.Errorf("(-want,+got):\n%s", diff)
	}
}
