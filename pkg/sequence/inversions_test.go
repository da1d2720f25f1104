package sequence

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"wavegate.io/wavegate/pkg/readiness"
	"wavegate.io/wavegate/pkg/resolve"
)

func object(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func memberOf(t *testing.T, manifest, group string, order int32, ready readiness.Status, open bool) memberObject {
	t.Helper()
	u := object(t, manifest)
	return memberObject{Member: Member{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName(),
		Resolution: &resolve.Resolution{Group: group, GroupOrder: order}, Ready: &readiness.Result{Status: ready}}, Object: u, Open: open}
}

func TestInversions(t *testing.T) {
	const web = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  template:
    spec:
      serviceAccountName: web
      volumes:
      - {name: data, persistentVolumeClaim: {claimName: data}}
      - {name: cfg, configMap: {name: settings}}
      - {name: opt, configMap: {name: optional, optional: true}}
      containers:
      - name: c
        envFrom: [{configMapRef: {name: env}}]
        env: [{name: X, valueFrom: {configMapKeyRef: {name: keyed, key: x}}}]`
	cm := func(name string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: shop}"
	}
	const pvc = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: shop}"
	const sa = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: web, namespace: shop}"
	const otherNS = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: elsewhere}"
	cases := map[string]struct {
		members []memberObject
		want    []string
	}{
		"a mounted ConfigMap of a later group": {
			members: []memberObject{memberOf(t, web, "app", 1, readiness.InProgress, true), memberOf(t, cm("settings"), "config", 2, readiness.Ready, false)},
			want: []string{"Deployment shop/web (group app) mounts ConfigMap shop/settings of the later group config: " +
				"move ConfigMap settings to group app or earlier, or Deployment web to group config or later"},
		},
		"envFrom, a key reference, a PVC and the ServiceAccount of later groups": {
			members: []memberObject{memberOf(t, web, "app", 1, readiness.InProgress, true), memberOf(t, cm("env"), "late", 5, readiness.Ready, false),
				memberOf(t, cm("keyed"), "late", 5, readiness.Ready, false), memberOf(t, pvc, "storage", 3, readiness.Ready, false),
				memberOf(t, sa, "rbac", 4, readiness.Ready, false)},
			want: []string{
				"Deployment shop/web (group app) mounts PersistentVolumeClaim shop/data of the later group storage: move PersistentVolumeClaim data to group app or earlier, or Deployment web to group storage or later",
				"Deployment shop/web (group app) reads ConfigMap shop/env of the later group late: move ConfigMap env to group app or earlier, or Deployment web to group late or later",
				"Deployment shop/web (group app) reads ConfigMap shop/keyed of the later group late: move ConfigMap keyed to group app or earlier, or Deployment web to group late or later",
				"Deployment shop/web (group app) runs as ServiceAccount shop/web of the later group rbac: move ServiceAccount web to group app or earlier, or Deployment web to group rbac or later",
			},
		},
		"the dependency in an earlier group is the right order": {
			members: []memberObject{memberOf(t, web, "app", 2, readiness.InProgress, true), memberOf(t, cm("settings"), "config", 1, readiness.Ready, true)},
		},
		"a ready member waits on nothing": {
			members: []memberObject{memberOf(t, web, "app", 1, readiness.Ready, true), memberOf(t, cm("settings"), "config", 2, readiness.Ready, false)},
		},
		"a member whose group is not open yet waits for its turn": {
			members: []memberObject{memberOf(t, web, "app", 1, readiness.InProgress, false), memberOf(t, cm("settings"), "config", 2, readiness.Ready, false)},
		},
		"an optional ConfigMap is not needed": {
			members: []memberObject{memberOf(t, web, "app", 1, readiness.InProgress, true), memberOf(t, cm("optional"), "config", 2, readiness.Ready, false)},
		},
		"another namespace's object of the same name": {
			members: []memberObject{memberOf(t, web, "app", 1, readiness.InProgress, true), memberOf(t, otherNS, "config", 2, readiness.Ready, false)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, inv := range Inversions(tc.members) {
				got = append(got, inv.Message())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Inversions (-want,+got):\n%s", diff)
			}
		})
	}
}
