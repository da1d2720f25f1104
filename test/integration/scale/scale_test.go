// Package scale measures the manager's memory and the load it puts on a real API server with many
// members.
package scale

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/test/framework"
)

func heapMiB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// parallel runs n calls of f on workers goroutines.
func parallel(b *testing.B, n, workers int, f func(i int) error) {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// BenchmarkManagerMemory creates WAVEGATE_SCALE_WORKLOADS labeled Deployments (default 10,000)
// and five pods each (50,000), plus as many unlabeled Deployments that must never be cached, then
// starts a manager and reports its heap once its caches have synced. One iteration is one run.
func BenchmarkManagerMemory(b *testing.B) {
	workloads := 10000
	if v := os.Getenv("WAVEGATE_SCALE_WORKLOADS"); v != "" {
		fmt.Sscan(v, &workloads)
	}
	env, err := framework.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	cfg := *env.Config
	cfg.QPS, cfg.Burst = -1, 0 // no client-side limit: the API server's own flow control applies
	cs := kubernetes.NewForConfigOrDie(&cfg)
	ctx := context.Background()
	const namespaces = 50
	for n := range namespaces {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%d", n)}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	spec := func(app string) appsv1.DeploymentSpec {
		sel := map[string]string{"app": app}
		return appsv1.DeploymentSpec{Replicas: ptr.To[int32](5), Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example.com/app:v1", Args: []string{"--a", "--b"},
					Env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}}}}}}
	}
	start := time.Now()
	parallel(b, 2*workloads, 16, func(i int) error {
		ns := fmt.Sprintf("scale-%d", i%namespaces)
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("d%d", i), Namespace: ns}, Spec: spec(fmt.Sprintf("d%d", i))}
		if i < workloads {
			d.Labels = map[string]string{keys.GroupLabel: fmt.Sprintf("g%d", i%5), keys.GroupOrderLabel: fmt.Sprint(i % 5)}
		}
		created, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		if err != nil || i >= workloads {
			return err
		}
		for r := range 5 {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", d.Name, r), Namespace: ns,
				Labels:          map[string]string{keys.GroupLabel: d.Labels[keys.GroupLabel], "pod-template-hash": "h"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: d.Name, UID: types.UID(created.UID), Controller: ptr.To(true)}}},
				Spec: d.Spec.Template.Spec}
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	b.Logf("created %d labeled and %d unlabeled Deployments and %d pods in %s", workloads, workloads, 5*workloads, time.Since(start).Round(time.Second))
	// The namespaces opt in now (the objects were created without the webhook, which is not running
	// yet): wavegate acts only in opted-in namespaces, so the manager tracks them in full.
	for n := range namespaces {
		ns, err := cs.CoreV1().Namespaces().Get(ctx, fmt.Sprintf("scale-%d", n), metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		ns.Labels[keys.EnabledLabel] = "true"
		if _, err := cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}

	before := heapMiB()
	b.ResetTimer()
	for range b.N {
		requestsBefore := apiRequests(b, cs)
		mgr, err := env.StartManager(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for !mgr.Wavegate.Members.HasSynced() || !mgr.GetCache().WaitForCacheSync(ctx) {
			time.Sleep(100 * time.Millisecond)
		}
		settle(b, "sequence") // the heap of a settled manager, not of a LIST decoded in flight
		b.ReportMetric(heapMiB()-before, "heap-MiB")
		started := apiRequests(b, cs)
		// The settled manager's steady load, over a window with nothing changing.
		const idle = 10 * time.Second
		time.Sleep(idle)
		settled := apiRequests(b, cs)
		mgr.Stop()
		startup, steady := started.minus(requestsBefore), settled.minus(started)
		b.Logf("API requests from the manager's start until it settled: %s", startup)
		b.Logf("API requests in the %s after: %s", idle, steady)
		b.ReportMetric(startup.sum(nil), "start-requests")
		b.ReportMetric(startup.sum(writeVerbs), "start-writes")
		b.ReportMetric(steady.sum(nil)/idle.Seconds(), "idle-requests/s")
	}
	b.ReportMetric(0, "ns/op")
}

// settle waits until a controller has had nothing to do for a second: an empty queue and no active
// worker, read from controller-runtime's metrics (at most two minutes).
func settle(b *testing.B, controller string) {
	b.Helper()
	idleSince := time.Time{}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		busy := false
		families, err := crmetrics.Registry.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != "workqueue_depth" && f.GetName() != "controller_runtime_active_workers" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if (l.GetName() == "name" || l.GetName() == "controller") && l.GetValue() == controller && m.GetGauge().GetValue() > 0 {
						busy = true
					}
				}
			}
		}
		switch {
		case busy:
			idleSince = time.Time{}
		case idleSince.IsZero():
			idleSince = time.Now()
		case time.Since(idleSince) > time.Second:
			return
		}
	}
	b.Fatalf("controller %s did not settle in two minutes", controller)
}

// requests counts the API server's requests by "VERB resource", as its apiserver_request_total
// metric does (every client's: the manager's, and the API server's own loopback requests).
type requests map[string]float64

// writeVerbs are the verbs of apiserver_request_total that change objects.
var writeVerbs = []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}

// apiRequests reads apiserver_request_total from the API server's /metrics.
func apiRequests(b *testing.B, cs kubernetes.Interface) requests {
	b.Helper()
	families, err := framework.APIServerMetrics(context.Background(), cs)
	if err != nil {
		b.Fatal(err)
	}
	out := requests{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		var verb, resource string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				resource = l.GetValue()
			}
		}
		out[verb+" "+resource] += m.GetCounter().GetValue()
	}
	return out
}

func (r requests) minus(before requests) requests {
	out := requests{}
	for k, v := range r {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// sum adds the counts of the given verbs (all when verbs is nil).
func (r requests) sum(verbs []string) float64 {
	total := 0.0
	for k, v := range r {
		if verbs == nil || slices.Contains(verbs, verbOf(k)) {
			total += v
		}
	}
	return total
}

func verbOf(key string) string {
	verb, _, _ := strings.Cut(key, " ")
	return verb
}

func (r requests) String() string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(r[b], r[a]), strings.Compare(a, b)) // most requests first
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, r[k]))
	}
	return fmt.Sprintf("%.0f in all: %s", r.sum(nil), strings.Join(parts, ", "))
}
