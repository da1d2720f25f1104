package teardown

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/resolve"
)

// TestPodsThatKeepAClaimBeingDeletedGo: in a namespace being deleted, the manager deletes the pods
// that keep a claim of the sequence being deleted when the DELETE check would let them go (before
// the claim's group, or nothing of the sequence after them): the namespace controller, stopped at
// a held pod whose name comes first, would never ask. Group operator (1) holds a ConfigMap and a
// claim being deleted (its own), group data (2) claim data, group reports (3) claim reports.
func TestPodsThatKeepAClaimBeingDeletedGo(t *testing.T) {
	claims := members.Kind{GVR: claimsGVR, GVK: schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}, Namespaced: true}
	placed := func(kind members.Kind, name, group string, order int32, deleted bool) resolvedObject {
		u := configMap(name, nil, nil, deleted)
		return resolvedObject{members.Object{Kind: kind, Unstructured: u}, &resolve.Resolution{Sequence: "shop", Group: group, GroupOrder: order}}
	}
	group := func(name, order string) map[string]string {
		return map[string]string{keys.GroupLabel: name, keys.GroupOrderLabel: order}
	}
	pod := func(name string, labels map[string]string, claimNames ...string) runtime.Object {
		var volumes []any
		for _, c := range claimNames {
			volumes = append(volumes, map[string]any{"name": c, "persistentVolumeClaim": map[string]any{"claimName": c}})
		}
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "shop", "uid": name}, "spec": map[string]any{"volumes": volumes}}}
		u.SetLabels(labels)
		return u
	}
	cases := map[string]struct {
		pods        []runtime.Object
		reportsLeft bool // group reports still has its claim (not being deleted)
		terminating bool
		want        []string // the pods left
	}{
		"a pod in no group on a later group's claim goes":      {pods: []runtime.Object{pod("backup", nil, "data")}, terminating: true},
		"an earlier group's pod on a later group's claim goes": {pods: []runtime.Object{pod("operator", group("operator", "1"), "data")}, terminating: true},
		"the operator's pod on its own claim stays while later groups remain": {pods: []runtime.Object{pod("operator", group("operator", "1"), "operator-data")},
			terminating: true, want: []string{"operator"}},
		"a pod in no group on the earliest group's claim stays": {pods: []runtime.Object{pod("backup", nil, "operator-data")}, terminating: true, want: []string{"backup"}},
		// Nothing after group reports: the DELETE check would let its pod go, and no controller
		// would delete a bare pod.
		"the last group's bare pod on its own group's claim goes": {pods: []runtime.Object{pod("loader", group("reports", "3"), "reports")}, terminating: true},
		"a group's pod on its own claim stays while a later group remains": {pods: []runtime.Object{pod("loader", group("data", "2"), "data")},
			reportsLeft: true, terminating: true, want: []string{"loader"}},
		"every claim a pod mounts counts": {pods: []runtime.Object{pod("loader", group("data", "2"), "data", "reports")}, terminating: true},
		"another sequence's pod stays": {pods: []runtime.Object{pod("other", map[string]string{keys.GroupLabel: "x", keys.GroupOrderLabel: "1", keys.SequenceLabel: "shop.other"}, "data")},
			terminating: true, want: []string{"other"}},
		"nothing goes in a namespace that is not being deleted": {pods: []runtime.Object{pod("backup", nil, "data")}, want: []string{"backup"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			all := []resolvedObject{
				placed(configMaps, "operator-config", "operator", 1, true),
				placed(claims, "operator-data", "operator", 1, true),
				placed(claims, "data", "data", 2, true),
				placed(claims, "reports", "reports", 3, !tc.reportsLeft),
			}
			shop := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{keys.EnabledLabel: "true"}}}
			if tc.terminating {
				shop.DeletionTimestamp, shop.Finalizers = &metav1.Time{Time: time.Unix(1, 0)}, []string{"kubernetes"}
			}
			dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), tc.pods...)
			h := &Holder{Client: fake.NewClientBuilder().WithObjects(shop).Build(), Tracker: &members.Tracker{Dynamic: dyn}}
			if err := h.freeLaterClaims(context.Background(), "shop", all, all, policy.Compile(nil), allOptedIn{}); err != nil {
				t.Fatal(err)
			}
			list, err := dyn.Resource(podsGVR).Namespace("shop").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, p := range list.Items {
				left = append(left, p.GetName())
			}
			slices.Sort(left)
			if d := cmp.Diff(tc.want, left); d != "" {
				t.Errorf("pods left (-want +got):\n%s", d)
			}
		})
	}
}
