package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRenderResourceList(t *testing.T) {
	in := `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: settings
    namespace: shop
    labels: {wavegate.io/group: db, wavegate.io/order: "2"}
- apiVersion: wavegate.io/v1alpha1
  kind: WavePolicy
  metadata: {name: p}
  spec:
    groups: [{name: db, order: 4}]
`
	var out bytes.Buffer
	if err := Render(strings.NewReader(in), &out, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: ResourceList", `argocd.argoproj.io/sync-wave: "402"`, `resolved.wavegate.io/group-order: "4"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRenderErrorsNameTheObjectAndField(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"bad order": {in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: a, labels: {wavegate.io/group: db, wavegate.io/group-order: \"1\", wavegate.io/order: \"77\"}}\n",
			want: `ConfigMap x: metadata.labels[wavegate.io/order]: Invalid value: "77"`},
		"no namespace": {in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, labels: {wavegate.io/group: db, wavegate.io/group-order: \"1\"}}\n",
			want: "ConfigMap x has no namespace: set metadata.namespace, pass --namespace"},
		"not yaml": {in: "a: [\n", want: "not YAML"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := Render(strings.NewReader(tc.in), &bytes.Buffer{}, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestRenderIsIdempotent(t *testing.T) {
	in := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop, labels: {wavegate.io/group: web, wavegate.io/group-order: \"3\"}}\nspec: {template: {metadata: {labels: {app: web}}}}\n"
	var once, twice bytes.Buffer
	if err := Render(strings.NewReader(in), &once, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := Render(bytes.NewReader(once.Bytes()), &twice, Options{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(once.String(), twice.String()); diff != "" {
		t.Errorf("rendering rendered output changed it (-once,+twice):\n%s", diff)
	}
}

// TestRenderSeesNamespaceLabels: policies select namespaces by label, as admission sees them. A
// Namespace in the stream brings its labels (and its name label, which the API server sets), and
// labels can be given for one that is not; without either, render warns that it sees only the
// name. It used to see no labels at all, so a scoped policy never applied.
func TestRenderSeesNamespaceLabels(t *testing.T) {
	policy := `apiVersion: wavegate.io/v1alpha1
kind: WavePolicy
metadata: {name: team-a}
spec:
  namespaceSelector: {matchLabels: {team: a}}
  groups: [{name: db, order: 4}]
---
apiVersion: wavegate.io/v1alpha1
kind: WavePolicy
metadata: {name: by-name}
spec:
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: named}}
  groups: [{name: cache, order: 6}]
---
`
	cm := func(ns, group string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: " + ns + ", labels: {wavegate.io/group: " + group + "}}\n---\n"
	}
	cases := map[string]struct {
		in      string
		o       Options
		want    string
		warning string
	}{
		"a Namespace in the stream": {in: policy + "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {team: a}}\n---\n" + cm("shop", "db"),
			want: `argocd.argoproj.io/sync-wave: "400"`},
		"labels given": {in: policy + cm("shop", "db"), o: Options{NamespaceLabels: map[string]map[string]string{"shop": {"team": "a"}}},
			want: `argocd.argoproj.io/sync-wave: "400"`},
		"only the name label": {in: policy + cm("named", "cache"), want: `argocd.argoproj.io/sync-wave: "600"`,
			warning: "namespace named is not in the manifests"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, warnings bytes.Buffer
			tc.o.Warnings = &warnings
			if err := Render(strings.NewReader(tc.in), &out, tc.o); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out.String())
			}
			if got := warnings.String(); tc.warning == "" && got != "" || !strings.Contains(got, tc.warning) {
				t.Errorf("warnings %q, want %q", got, tc.warning)
			}
		})
	}
}
