//go:build e2e

package e2e

import (
	"context"
	"sort"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"wavegate.io/wavegate/pkg/keys"
)

// TestArgoCDAppDeletionFollowsLiveWaves applies Argo CD's cascade deletion rule to the live
// objects: sort by the live argocd.argoproj.io/sync-wave (which wavegate stamped; Git has none),
// delete the highest wave first with foreground propagation (Argo CD's prune default), wait while
// any object of that wave still exists, then the next wave. With the waves wavegate derived, the
// custom resources go before their operator, so no foreground DELETE is refused and nothing is
// left stuck. (Argo CD's own sync engine is not linked: see the closing notes.)
func TestArgoCDAppDeletionFollowsLiveWaves(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	installWidgets(t)

	// The application's objects, as Argo CD tracks them, with their live waves.
	type obj struct {
		gvr  schema.GroupVersionResource
		ns   string
		name string
		wave int
	}
	var objs []obj
	collect := func(gvr schema.GroupVersionResource, ns string) {
		list, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: keys.GroupLabel})
		g.Expect(err).NotTo(HaveOccurred())
		for _, u := range list.Items {
			if u.GetLabels()[keys.WaitJobLabel] != "" || len(u.GetOwnerReferences()) > 0 {
				continue // children, which Argo CD does not prune itself
			}
			w, err := strconv.Atoi(u.GetAnnotations()[keys.ArgoCDSyncWaveAnnotation])
			g.Expect(err).NotTo(HaveOccurred(), "%s has no live sync-wave", u.GetName())
			objs = append(objs, obj{gvr, u.GetNamespace(), u.GetName(), w})
		}
	}
	collect(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "widgets")
	collect(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, "widgets")
	collect(schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, "widgets")
	collect(schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, "widgets")
	collect(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, "widgets")
	collect(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, "")
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].wave > objs[j].wave })
	waves := make([]int, len(objs))
	for i, o := range objs {
		waves[i] = o.wave
	}
	// The Widgets; the operator's Deployment, ServiceAccount, Role and binding; the CRD.
	g.Expect(waves).To(Equal([]int{200, 200, 100, 100, 100, 100, 0}))

	fg := metav1.DeletePropagationForeground
	for i := 0; i < len(objs); {
		j := i
		for j < len(objs) && objs[j].wave == objs[i].wave {
			g.Expect(dyn.Resource(objs[j].gvr).Namespace(objs[j].ns).Delete(ctx, objs[j].name, metav1.DeleteOptions{PropagationPolicy: &fg})).
				To(Succeed(), "deleting wave %d was refused", objs[j].wave)
			j++
		}
		for _, o := range objs[i:j] {
			g.Eventually(func() bool {
				_, err := dyn.Resource(o.gvr).Namespace(o.ns).Get(ctx, o.name, metav1.GetOptions{})
				return err != nil
			}).WithTimeout(90*time.Second).WithPolling(200*time.Millisecond).Should(BeTrue(), "%s (wave %d) is stuck", o.name, o.wave)
		}
		i = j
	}
	run(t, "delete", "namespace", "widgets", "--wait=true", "--timeout=60s")
}
