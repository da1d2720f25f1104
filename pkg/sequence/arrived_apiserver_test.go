package sequence_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
)

// TestArrivedAgainstAnAPIServer: the tracker's informers, listing and watching a real API server
// (a streamed list, where the transform runs twice per object), date what they received after
// they synced, and only that: an object listed carries no arrival; one created later carries the
// moment it was received, which an annotation change keeps and a label change moves.
func TestArrivedAgainstAnAPIServer(t *testing.T) {
	g := NewWithT(t)
	e := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "arrived"}}
	g.Expect(e.Client.Create(ctx, ns)).To(Succeed())
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name, Labels: map[string]string{keys.GroupLabel: "db"}}}
	}
	listed := cm("listed")
	g.Expect(e.Client.Create(ctx, listed)).To(Succeed())

	tr := &members.Tracker{Dynamic: dynamic.NewForConfigOrDie(e.Config), Discovery: discovery.NewDiscoveryClientForConfigOrDie(e.Config),
		GroupLabels: func() []string { return []string{keys.GroupLabel} }}
	go func() { _ = tr.Start(ctx) }()
	g.Eventually(tr.HasSynced).WithTimeout(30 * time.Second).Should(BeTrue())
	// object returns the tracked ConfigMap name once the tracker holds it at version rv.
	object := func(name, rv string) members.Object {
		t.Helper()
		var out members.Object
		g.Eventually(func() string {
			for _, o := range tr.Members(ns.Name) {
				if o.GetName() == name {
					out = o
					return o.GetResourceVersion()
				}
			}
			return ""
		}).WithTimeout(10 * time.Second).WithPolling(5 * time.Millisecond).Should(Equal(rv))
		return out
	}

	if got := object("listed", listed.ResourceVersion).Arrived; !got.IsZero() {
		t.Errorf("Arrived of an object the informer listed: %v, want none", got)
	}
	before := time.Now()
	created := cm("created")
	g.Expect(e.Client.Create(ctx, created)).To(Succeed())
	arrived := object("created", created.ResourceVersion).Arrived
	if arrived.Before(before) || arrived.After(time.Now()) {
		t.Fatalf("Arrived of an object created after the informer synced: %v, want between %v and now", arrived, before)
	}
	created.Annotations = map[string]string{"note": "x"}
	g.Expect(e.Client.Update(ctx, created)).To(Succeed())
	if got := object("created", created.ResourceVersion).Arrived; !got.Equal(arrived) {
		t.Errorf("Arrived after an annotation changed: %v, want %v", got, arrived)
	}
	created.Labels[keys.GroupOrderLabel] = "1"
	g.Expect(e.Client.Update(ctx, created)).To(Succeed())
	if got := object("created", created.ResourceVersion).Arrived; !got.After(arrived) {
		t.Errorf("Arrived after a label changed: %v, want later than %v", got, arrived)
	}
}
