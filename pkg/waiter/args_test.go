package waiter

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

func TestArgsRoundTrip(t *testing.T) {
	cases := map[string]Args{
		"members and readiness": {Sequence: "shop", Group: "database",
			Members: []Member{{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, Namespace: "shop", Name: "db"},
				{GVR: schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, Name: "widgets.example.com"}},
			Readiness: wavev1.Readiness{AssumeReadyWithoutConditions: true, Rules: []wavev1.ReadinessRule{{APIVersion: "example.com/v1", Kind: "Widget", Current: "true"}}}},
		"the planned objects": {Sequence: "shop", Group: "web", Job: "shop/wavegate-wait-web-0123456789",
			Members: []Member{{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Namespace: "shop", Name: "web",
				UID: "0b9ad5c6-4c1e-4d3e-9a51-3f1f0c0e6e2a", Generation: 7}}},
		"readiness by namespace": {Sequence: "platform", Group: "instances",
			Readiness: wavev1.Readiness{LoadBalancerIngress: true},
			NamespaceReadiness: map[string]wavev1.Readiness{
				"apps": {AssumeReadyWithoutConditions: true},
				"ops":  {},
				"":     {Rules: []wavev1.ReadinessRule{{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.status.ok"}}},
			}},
		"nothing but the group": {Sequence: "s", Group: "g"},
		"a timeout by hand":     {Sequence: "s", Group: "g", Timeout: 90 * time.Second},
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseArgs(want.Encode())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("round trip (-want,+got):\n%s", diff)
			}
			// The settings alone, as the manager reads them on every pass.
			settings, err := ParseReadiness(want.Encode())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(Args{Readiness: want.Readiness, NamespaceReadiness: want.NamespaceReadiness}, settings); diff != "" {
				t.Errorf("ParseReadiness (-want,+got):\n%s", diff)
			}
		})
	}
	// A flag of a newer manager is skipped, with its value.
	newer := append(Args{Sequence: "s", Group: "g", Members: []Member{{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
		Namespace: "shop", Name: "web"}}}.Encode(), "--from-the-future", "x", "--other=y")
	if got, err := ParseArgs(newer); err != nil || got.Group != "g" || len(got.Members) != 1 {
		t.Errorf("ParseArgs(%q) = %+v, %v; want the known flags parsed and the others skipped", newer, got, err)
	}
	// The flags' "=" form too.
	if got, err := ParseReadiness([]string{"wait", "--readiness={\"loadBalancerIngress\":true}", "--namespace-readiness=ops={}"}); err != nil ||
		!got.Readiness.LoadBalancerIngress || len(got.NamespaceReadiness) != 1 {
		t.Errorf("ParseReadiness of the = form = %+v, %v", got, err)
	}
	for _, bad := range [][]string{{"status"}, {"wait", "--readiness", "{"}, {"wait", "--namespace-readiness", "apps"}} {
		if _, err := ParseReadiness(bad); err == nil {
			t.Errorf("ParseReadiness(%q) accepted garbage", bad)
		}
	}
	for _, bad := range [][]string{nil, {"status"}, {"wait", "--member", "not-a-member"}, {"wait", "--readiness", "{"},
		{"wait", "--member", "apps/v1/deployments/shop/web/uid"}, {"wait", "--member", "apps/v1/deployments/shop/web/uid/-1"},
		{"wait", "--member", "apps/v1/deployments/shop/web/uid/seven"},
		{"wait", "--job", "no-namespace"}, {"wait", "--job", "shop/a/b"},
		{"wait", "--namespace-readiness", "apps"}, {"wait", "--namespace-readiness", "apps={"}} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("ParseArgs(%q) accepted garbage", bad)
		}
	}
}

// Rules that do not compile stop the waiter, naming the flag and the namespace, whichever
// member's policy has them: a group is never judged by rules its policy did not mean.
func TestCheckersRefuseRulesThatDoNotCompile(t *testing.T) {
	bad := wavev1.Readiness{Rules: []wavev1.ReadinessRule{{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.status.("}}}
	for name, tc := range map[string]struct {
		args Args
		want string
	}{
		"the group's":      {Args{Readiness: bad}, "--readiness"},
		"a namespace's":    {Args{NamespaceReadiness: map[string]wavev1.Readiness{"apps": {}, "ops": bad}}, "--namespace-readiness ops"},
		"none of them bad": {Args{Readiness: wavev1.Readiness{LoadBalancerIngress: true}, NamespaceReadiness: map[string]wavev1.Readiness{"apps": {}}}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			def, byNamespace, err := tc.args.Checkers()
			if tc.want == "" {
				if err != nil || def == nil || byNamespace["apps"] == nil {
					t.Fatalf("Checkers() = %v, %v, %v; want both checkers", def, byNamespace, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Checkers() error = %v; want one naming %s", err, tc.want)
			}
		})
	}
}

// TestFingerprint: what a waiter judges has one fingerprint, whichever side of the Job's
// arguments computes it (the waiter from its parsed flags, the manager from the Job's), and
// another as soon as a member or a readiness setting differs.
func TestFingerprint(t *testing.T) {
	web := Member{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Namespace: "shop", Name: "web", UID: "u", Generation: 1}
	base := Args{Sequence: "shop", Group: "web", Job: "shop/wj", Members: []Member{web}}
	variants := map[string]func(*Args){
		"as is":              func(*Args) {},
		"another generation": func(a *Args) { a.Members[0].Generation = 2 },
		"load balancers":     func(a *Args) { a.Readiness.LoadBalancerIngress = true },
		"a rule": func(a *Args) {
			a.Readiness.Rules = []wavev1.ReadinessRule{{APIVersion: "v1", Kind: "Service", Current: "true"}}
		},
		"a namespace's":         func(a *Args) { a.NamespaceReadiness = map[string]wavev1.Readiness{"b": {LoadBalancerIngress: true}} },
		"another namespace's":   func(a *Args) { a.NamespaceReadiness = map[string]wavev1.Readiness{"c": {LoadBalancerIngress: true}} },
		"a namespace with none": func(a *Args) { a.NamespaceReadiness = map[string]wavev1.Readiness{"b": {}} },
	}
	seen := map[string]string{}
	for name, change := range variants {
		a := base
		a.Members = slices.Clone(base.Members)
		change(&a)
		parsed, err := ParseArgs(a.Encode())
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseArgs(parsed.Encode())
		if err != nil {
			t.Fatal(err)
		}
		fp := parsed.Fingerprint()
		if fp != again.Fingerprint() {
			t.Errorf("%s: the fingerprint changes through the Job's arguments: %s, then %s", name, fp, again.Fingerprint())
		}
		if other, dup := seen[fp]; dup {
			t.Errorf("%s and %s have the same fingerprint %s", name, other, fp)
		}
		seen[fp] = name
	}
	// The Job and a timeout are not what the waiter judges.
	same := base
	same.Job, same.Timeout = "shop/other", time.Minute
	if same.Fingerprint() != base.Fingerprint() {
		t.Error("the fingerprint depends on the Job's name or the timeout")
	}
}
