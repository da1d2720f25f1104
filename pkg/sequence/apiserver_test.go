package sequence_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
	"wavegate.io/wavegate/test/framework"
)

// env is a real kube-apiserver (`make test` builds it) for what depends on its answers, started by
// the first test that needs it: the package's unit tests and `make bench` run without it.
var (
	env     *framework.Env
	envErr  error
	envOnce sync.Once
)

func apiServer(t *testing.T) *framework.Env {
	t.Helper()
	envOnce.Do(func() { env, envErr = framework.Start() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	return env
}

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// gatedPod is a pod with the scheduling gates named, in that order.
func gatedPod(namespace, name string, gates ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app"}}}}
	for _, g := range gates {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
	}
	return p
}

// TestRemoveGateAlreadyRemoved, against a real API server: a pod whose gate a previous pass removed,
// which the cache still shows gated, is not an error and gets no second patch (its resourceVersion
// is unchanged): the API server refuses the patch whose test no longer applies (422), and the pod is read.
// A pod whose gates are not where the cache saw them is read and released.
func TestRemoveGateAlreadyRemoved(t *testing.T) {
	ctx := context.Background()
	c := apiServer(t).Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "remove-gate"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, gates ...string) *corev1.Pod { return gatedPod(ns.Name, name, gates...) }
	r := &sequence.Reconciler{Client: c, APIReader: c}
	// released: the controller removed the gate; the cache's copy is from before.
	released := pod("released", keys.SchedulingGate)
	if err := c.Create(ctx, released); err != nil {
		t.Fatal(err)
	}
	stale := released.DeepCopy()
	if err := r.RemoveGate(ctx, released.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	first := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(released), first); err != nil {
		t.Fatal(err)
	}
	// moved: another gate came first; the cache saw only wavegate's.
	moved := pod("moved", "example.com/other", keys.SchedulingGate)
	if err := c.Create(ctx, moved); err != nil {
		t.Fatal(err)
	}
	staleMoved := moved.DeepCopy()
	staleMoved.Spec.SchedulingGates = staleMoved.Spec.SchedulingGates[1:]

	for _, p := range []*corev1.Pod{stale, staleMoved} {
		if err := r.RemoveGate(ctx, p); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	got := map[string][]corev1.PodSchedulingGate{}
	for _, name := range []string{"released", "moved"} {
		cur := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: name}, cur); err != nil {
			t.Fatal(err)
		}
		got[name] = cur.Spec.SchedulingGates
		if name == "released" && cur.ResourceVersion != first.ResourceVersion {
			t.Errorf("the released pod was patched again: resourceVersion %s, then %s", first.ResourceVersion, cur.ResourceVersion)
		}
	}
	want := map[string][]corev1.PodSchedulingGate{"released": nil, "moved": {{Name: "example.com/other"}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("gates (-want +got):\n%s", d)
	}
}

// TestRemoveGateSparesAPodRecreatedUnderItsName, against a real API server: a pass decides on the
// pod it saw (a StatefulSet's web-0, say), and the pod is deleted and created again under the same
// name before the pass patches it (its group's earlier group became unready meanwhile, so the new
// pod was gated on the new state). The new pod keeps its gate, also when its gates are not where
// the cache saw the old pod's (the path that reads the pod again).
func TestRemoveGateSparesAPodRecreatedUnderItsName(t *testing.T) {
	ctx := context.Background()
	c := apiServer(t).Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "remove-gate-recreated"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	r := &sequence.Reconciler{Client: c, APIReader: c}
	for _, tc := range []struct {
		name  string
		gates []string
	}{
		{"web-0", []string{keys.SchedulingGate}},
		{"web-1", []string{"example.com/other", keys.SchedulingGate}},
	} {
		old := gatedPod(ns.Name, tc.name, keys.SchedulingGate)
		if err := c.Create(ctx, old); err != nil {
			t.Fatal(err)
		}
		// Gone at once: it was never bound.
		if err := c.Delete(ctx, old, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		recreated := gatedPod(ns.Name, tc.name, tc.gates...)
		if err := c.Create(ctx, recreated); err != nil {
			t.Fatal(err)
		}
		if err := r.RemoveGate(ctx, old); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		cur := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(recreated), cur); err != nil {
			t.Fatal(err)
		}
		if cur.UID != recreated.UID {
			t.Fatalf("%s: the test proves nothing: the pod was not recreated", tc.name)
		}
		if d := cmp.Diff(recreated.Spec.SchedulingGates, cur.Spec.SchedulingGates); d != "" {
			t.Errorf("%s: the gates of the pod created again under its name (-want +got):\n%s", tc.name, d)
		}
	}
}

// TestDisarmJob, against a real API server: the deadline of a running Job can be removed (the Job
// controller then no longer times it out); a second removal from a cache that still shows the
// deadline is refused by the API server (422: the path is gone), which is not an error, and
// changes nothing.
func TestDisarmJob(t *testing.T) {
	ctx := context.Background()
	c := apiServer(t).Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "disarm-job"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "wait", Namespace: ns.Name},
		Spec: batchv1.JobSpec{ActiveDeadlineSeconds: ptr.To[int64](601), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "wait", Image: "wavegate"}}}}}}
	if err := c.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	r := &sequence.Reconciler{Client: c, APIReader: c}
	if err := r.DisarmJob(ctx, j.DeepCopy(), "web"); err != nil {
		t.Fatal(err)
	}
	first := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(j), first); err != nil {
		t.Fatal(err)
	}
	if first.Spec.ActiveDeadlineSeconds != nil {
		t.Fatalf("the Job kept its deadline: %d", *first.Spec.ActiveDeadlineSeconds)
	}
	// The cache's copy is from before the first removal.
	if err := r.DisarmJob(ctx, j.DeepCopy(), "web"); err != nil {
		t.Fatalf("disarming a disarmed Job: %v", err)
	}
	cur := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(j), cur); err != nil {
		t.Fatal(err)
	}
	if cur.ResourceVersion != first.ResourceVersion {
		t.Errorf("the disarmed Job was patched again: resourceVersion %s, then %s", first.ResourceVersion, cur.ResourceVersion)
	}
}
