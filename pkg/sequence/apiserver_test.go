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
	pod := func(name string, gates ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app"}}}}
		for _, g := range gates {
			p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
		}
		return p
	}
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
