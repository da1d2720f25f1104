package members

import (
	"context"
	"fmt"
	"slices"
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

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}

// TestChangedAt: the tracker dates every event that may change a sequence's members (an object
// added, changed in generation or labels, being deleted, deleted) by its arrival, and no other:
// the settle dates an apply's changes by them (pkg/sequence), and a status update dated as a
// change would hold the groups longer. An object that moves to another sequence dates both.
func TestChangedAt(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList"})
	tr := &Tracker{
		Dynamic: dyn, Discovery: &gatedDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}},
		GroupLabels: func() []string { return []string{keys.GroupLabel} },
	}
	go func() { _ = tr.Start(ctx) }()
	g.Eventually(tr.HasSynced).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(BeTrue())
	if at := tr.ChangedAt("shop"); !at.IsZero() {
		t.Fatalf("ChangedAt before any member: %s, want zero", at)
	}
	cms := dyn.Resource(configMaps).Namespace("shop")
	// seen waits until the tracker holds the ConfigMap as cm is (the fake API server keeps no
	// resourceVersion: each write numbers itself in an annotation).
	seen := func(cm *unstructured.Unstructured) {
		t.Helper()
		g.Eventually(func() string {
			for _, o := range tr.Members(SequenceOf(cm)) {
				if o.GetName() == cm.GetName() {
					return o.GetAnnotations()["write"]
				}
			}
			return ""
		}).WithTimeout(10*time.Second).WithPolling(5*time.Millisecond).Should(Equal(cm.GetAnnotations()["write"]), "the tracker's copy of %s", cm.GetName())
	}
	writes := 0
	numbered := func(c *unstructured.Unstructured) *unstructured.Unstructured {
		writes++
		a := c.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a["write"] = fmt.Sprint(writes)
		c.SetAnnotations(a)
		return c
	}
	// step makes a change and reports whether it dated the sequences' changes (after it began).
	step := func(name string, change func() *unstructured.Unstructured, seqs ...string) {
		t.Helper()
		before := map[string]time.Time{}
		for _, s := range []string{"shop", "blog"} {
			before[s] = tr.ChangedAt(s)
		}
		began := time.Now()
		cm := change()
		if cm != nil {
			seen(cm)
		}
		for _, s := range []string{"shop", "blog"} {
			at, want := tr.ChangedAt(s), slices.Contains(seqs, s)
			if want && at.Before(began) || !want && !at.Equal(before[s]) {
				t.Errorf("%s: ChangedAt(%s) = %s (began %s, was %s); want it dated: %v", name, s, at, began, before[s], want)
			}
		}
	}
	var cm *unstructured.Unstructured
	update := func(mutate func(*unstructured.Unstructured)) func() *unstructured.Unstructured {
		return func() *unstructured.Unstructured {
			c := cm.DeepCopy()
			mutate(c)
			numbered(c)
			var err error
			if cm, err = cms.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			return cm
		}
	}
	step("added", func() *unstructured.Unstructured {
		var err error
		if cm, err = cms.Create(ctx, numbered(configMap("db", map[string]string{keys.GroupLabel: "db"})), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return cm
	}, "shop")
	step("its annotations changed", update(func(c *unstructured.Unstructured) { c.SetAnnotations(map[string]string{"note": "x"}) }))
	step("its status changed", update(func(c *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(c.Object, "True", "status", "ready")
	}))
	step("a new generation", update(func(c *unstructured.Unstructured) { c.SetGeneration(2) }), "shop")
	step("its group changed", update(func(c *unstructured.Unstructured) { c.SetLabels(map[string]string{keys.GroupLabel: "cache"}) }), "shop")
	step("moved to another sequence", update(func(c *unstructured.Unstructured) {
		c.SetLabels(map[string]string{keys.GroupLabel: "cache", keys.SequenceLabel: "blog"})
	}), "shop", "blog")
	step("being deleted", update(func(c *unstructured.Unstructured) { c.SetDeletionTimestamp(&metav1.Time{Time: time.Now()}) }), "blog")
	step("deleted", func() *unstructured.Unstructured {
		if err := cms.Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		g.Eventually(func() []Object { return tr.Members("blog") }).WithTimeout(10 * time.Second).Should(BeEmpty())
		return nil
	}, "blog")
	tr.ForgetChanges("blog")
	if at := tr.ChangedAt("blog"); !at.IsZero() {
		t.Errorf("ChangedAt of a forgotten sequence: %s, want zero", at)
	}
}
