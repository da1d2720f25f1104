package members

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"wavegate.io/wavegate/pkg/keys"
)

// TestArrived: a tracked object carries when the informer first received it in its present state
// as far as membership goes. One the informer listed has none (its list is no change); a change of
// anything else (an annotation, its status) keeps the moment; a change of its labels, generation,
// owner or deletion moves it; a version of the object other than the one last received has none; a
// deleted object's record goes.
func TestArrived(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cm := dbConfigMap()
	cm.SetUID("db-uid")
	cm.SetResourceVersion("1")
	dyn := configMapClient(cm)
	tr := &Tracker{
		Dynamic: dyn, Discovery: &gatedDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}},
		GroupLabels: func() []string { return []string{keys.GroupLabel} },
	}
	go func() { _ = tr.Start(ctx) }()
	g.Eventually(tr.HasSynced).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(BeTrue())

	// member waits until the tracker holds the object at version rv and returns it.
	member := func(rv string) Object {
		t.Helper()
		var out Object
		g.Eventually(func() string {
			for _, o := range append(tr.Members("shop"), tr.NonMembers("shop")...) {
				out = o
				return o.GetResourceVersion()
			}
			return ""
		}).WithTimeout(10 * time.Second).WithPolling(5 * time.Millisecond).Should(Equal(rv))
		return out
	}
	update := func(rv string, change func(*unstructured.Unstructured)) {
		t.Helper()
		cm.SetResourceVersion(rv)
		change(cm)
		if _, err := dyn.Resource(configMaps).Namespace("shop").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The informer's list says when it listed the object, not when the object changed.
	if got := member("1").Arrived; !got.IsZero() {
		t.Errorf("Arrived of an object the informer listed: %v, want none", got)
	}
	update("2", func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"note": "x"}) })
	if got := member("2").Arrived; !got.IsZero() {
		t.Errorf("Arrived of a listed object whose annotation changed: %v, want none", got)
	}
	update("3", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{keys.GroupLabel: "db2"}) })
	relabeled := member("3").Arrived
	if relabeled.IsZero() || relabeled.After(time.Now()) {
		t.Fatalf("Arrived after its group label changed: %v, want a moment before now", relabeled)
	}
	update("3a", func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"note": "y"}) })
	if got := member("3a").Arrived; !got.Equal(relabeled) {
		t.Errorf("Arrived after an annotation changed: %v, want %v (the same)", got, relabeled)
	}
	update("4", func(u *unstructured.Unstructured) { u.SetGeneration(2) })
	regenerated := member("4").Arrived
	if !regenerated.After(relabeled) {
		t.Errorf("Arrived after its generation changed: %v, want later than %v", regenerated, relabeled)
	}
	update("5", func(u *unstructured.Unstructured) {
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "owner-uid", Controller: ptr.To(true)}})
	})
	owned := member("5").Arrived
	if !owned.After(regenerated) {
		t.Errorf("Arrived after a controller came to own it (no member in its own right): %v, want later than %v", owned, regenerated)
	}
	update("6", func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&metav1.Time{Time: time.Now()}) })
	if got := member("6").Arrived; !got.After(owned) {
		t.Errorf("Arrived after its deletion began: %v, want later than %v", got, owned)
	}

	tracked := func() *tracked {
		tr.mu.RLock()
		defer tr.mu.RUnlock()
		for _, it := range tr.informers {
			return it
		}
		return nil
	}()
	older := cm.DeepCopy()
	older.SetResourceVersion("5")
	if got := tracked.arrivals.arrived(older); !got.IsZero() {
		t.Errorf("Arrived of a version other than the last received: %v, want none", got)
	}
	if err := dyn.Resource(configMaps).Namespace("shop").Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func() int {
		tracked.arrivals.mu.Lock()
		defer tracked.arrivals.mu.Unlock()
		return len(tracked.arrivals.of)
	}).WithTimeout(10*time.Second).WithPolling(5*time.Millisecond).Should(BeZero(), "records of deleted objects")
}
