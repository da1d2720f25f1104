package members

import (
	"context"
	"fmt"
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
	"k8s.io/utils/ptr"

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

// TestTrackerHasSynced: the tracker has not synced while it does not hold every member: from Start
// until the first Refresh has synced its informers (it waits for Ready first), and from a Rescope
// until the informers have re-listed. A sequence planned in either window would see no members,
// and delete its wait Jobs and status as stale.
func TestTrackerHasSynced(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	cm.SetNamespace("shop")
	cm.SetName("db")
	cm.SetLabels(map[string]string{keys.GroupLabel: "db"})
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList"}, cm)
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

	_, all := tr.ChangedAt("shop")
	g.Expect(all).To(BeTrue(), "every event heard")

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}

// TestChangedAtSaysWhenTheCacheIsAhead: an informer's cache shows an event before its handlers hear
// it. While some event of a sequence's objects has been queued (its transform ran) and not heard,
// ChangedAt says the time it returns may be older than a change the cache shows.
func TestChangedAtSaysWhenTheCacheIsAhead(t *testing.T) {
	inf := &tracked{}
	tr := &Tracker{informers: map[informerKey]*tracked{{}: inf}}
	if _, all := tr.ChangedAt("shop"); !all {
		t.Fatal("nothing queued: ChangedAt says some change is not heard")
	}
	inf.queued("shop")
	if _, all := tr.ChangedAt("shop"); all {
		t.Error("an event queued and not heard: ChangedAt says every change is heard")
	}
	if _, all := tr.ChangedAt("blog"); !all {
		t.Error("another sequence's event counts for shop")
	}
	inf.heard("shop")
	if _, all := tr.ChangedAt("shop"); !all {
		t.Error("the event heard: ChangedAt still says some change is not")
	}
}

// TestChangedAtHearsMemberChangesOnly: ChangedAt dates the changes of a sequence's members as the
// informers hear them (a member added, relabeled, deleted), and not its other events: a member's
// annotations or status, or an object a controller made (no member).
func TestChangedAtHearsMemberChangesOnly(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	configMap := func(ns, name string) *unstructured.Unstructured {
		cm := &unstructured.Unstructured{}
		cm.SetAPIVersion("v1")
		cm.SetKind("ConfigMap")
		cm.SetNamespace(ns)
		cm.SetName(name)
		cm.SetLabels(map[string]string{keys.GroupLabel: "db"})
		return cm
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList"}, configMap("shop", "db"))
	tr := &Tracker{Dynamic: dyn, Discovery: &gatedDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}},
		GroupLabels: func() []string { return []string{keys.GroupLabel} }}
	done := make(chan error, 1)
	go func() { done <- tr.Start(ctx) }()
	g.Eventually(tr.HasSynced).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(BeTrue())
	changedAt := func(seq string) time.Time {
		at, _ := tr.ChangedAt(seq)
		return at
	}
	g.Eventually(func() time.Time { return changedAt("shop") }).ShouldNot(BeZero(), "the listed member")
	cms := dyn.Resource(configMaps)
	// Events of one informer come in order: once a marker in another sequence is heard, the
	// changes made before it have been too.
	markers := 0
	heardBefore := func() {
		t.Helper()
		markers++
		ns := fmt.Sprintf("marker-%d", markers)
		_, err := cms.Namespace(ns).Create(ctx, configMap(ns, "m"), metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func() time.Time { return changedAt(ns) }).ShouldNot(BeZero())
	}
	listed := changedAt("shop")

	db, err := cms.Namespace("shop").Get(ctx, "db", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	db.SetAnnotations(map[string]string{"note": "status-like"})
	db, err = cms.Namespace("shop").Update(ctx, db, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	made := configMap("shop", "made")
	made.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "db", UID: "u", Controller: ptr.To(true)}})
	_, err = cms.Namespace("shop").Create(ctx, made, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	heardBefore()
	g.Expect(changedAt("shop")).To(Equal(listed), "an annotation of a member, or an object a controller made, is no change of the members")

	db.SetLabels(map[string]string{keys.GroupLabel: "cache"})
	_, err = cms.Namespace("shop").Update(ctx, db, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() time.Time { return changedAt("shop") }).Should(BeTemporally(">", listed), "a member relabeled")
	relabeled := changedAt("shop")
	g.Expect(cms.Namespace("shop").Delete(ctx, "db", metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func() time.Time { return changedAt("shop") }).Should(BeTemporally(">", relabeled), "a member deleted")

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}
