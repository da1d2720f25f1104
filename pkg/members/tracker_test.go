package members

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"wavegate.io/wavegate/pkg/keys"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// gatedDiscovery serves ConfigMaps, and first calls before (when set): a test holds a Refresh
// there.
type gatedDiscovery struct {
	*fakediscovery.FakeDiscovery
	before func()
}

func (d *gatedDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	if d.before != nil {
		d.before()
	}
	return []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}},
	}}}, nil
}

// dbConfigMap is shop's ConfigMap db, in group db.
func dbConfigMap() *unstructured.Unstructured {
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	cm.SetNamespace("shop")
	cm.SetName("db")
	cm.SetLabels(map[string]string{keys.GroupLabel: "db"})
	return cm
}

// configMapClient is a fake dynamic client that serves ConfigMaps, holding objs.
func configMapClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList"}, objs...)
}

// TestTrackerHasSynced: the tracker has not synced while it does not hold every member: from Start
// until the first Refresh has synced its informers (it waits for Ready first), and from a Rescope
// until the informers have re-listed. A sequence planned in either window would see no members,
// and delete its wait Jobs and status as stale.
func TestTrackerHasSynced(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dyn := configMapClient(dbConfigMap())
	disco := &gatedDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}}

	waiting := make(chan struct{}) // closed when Start first asks Ready
	ready := make(chan struct{})   // closed to answer Ready true
	tr := &Tracker{
		Dynamic: dyn, Discovery: disco,
		GroupLabels: func() []string { return []string{keys.GroupLabel} },
		Ready: func() bool {
			select {
			case <-waiting:
			default:
				close(waiting)
			}
			select {
			case <-ready:
				return true
			default:
				return false
			}
		},
	}
	members := func() []string {
		var out []string
		for _, o := range tr.Members("shop") {
			out = append(out, o.GetName())
		}
		return out
	}
	done := make(chan error, 1)
	go func() { done <- tr.Start(ctx) }()

	<-waiting
	if tr.HasSynced() {
		t.Errorf("HasSynced before the first discovery: true, want false")
	}
	close(ready)
	g.Eventually(tr.HasSynced).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(BeTrue())
	if d := cmp.Diff([]string{"db"}, members()); d != "" {
		t.Errorf("Members once synced (-want +got):\n%s", d)
	}

	// Hold the re-list's discovery: the informers are gone, and the tracker has not synced.
	relisting, resume := make(chan struct{}), make(chan struct{})
	disco.before = func() {
		close(relisting)
		<-resume
	}
	tr.Rescope()
	if tr.HasSynced() {
		t.Errorf("HasSynced right after Rescope: true, want false")
	}
	<-relisting
	if tr.HasSynced() {
		t.Errorf("HasSynced while re-listing, holding members %v: true, want false", members())
	}
	disco.before = nil
	close(resume)
	g.Eventually(tr.HasSynced).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(BeTrue())
	if d := cmp.Diff([]string{"db"}, members()); d != "" {
		t.Errorf("Members once re-listed (-want +got):\n%s", d)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}
