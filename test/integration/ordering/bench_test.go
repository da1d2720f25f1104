package ordering

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/readiness"
	"wavegate.io/wavegate/pkg/sequence"
	"wavegate.io/wavegate/pkg/waiter"
)

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func reportLatencies(b *testing.B, lat []time.Duration) {
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.9).Microseconds())/1000, "p90-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkReleaseLatency measures, inside the manager, the time from the moment a group's wait
// Job is marked Complete to the moment the last pod of the next group is ungated.
func BenchmarkReleaseLatency(b *testing.B) {
	cs := kubernetes.NewForConfigOrDie(env.Config)
	for _, pods := range []int{30, 100} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			var lat []time.Duration
			for i := 0; i < b.N; i++ {
				lat = append(lat, releaseOnce(b, cs, pods))
			}
			reportLatencies(b, lat)
		})
	}
}

func releaseOnce(b *testing.B, cs kubernetes.Interface, n int) time.Duration {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-", Labels: map[string]string{keys.EnabledLabel: "true"}}}
	must(b, env.Client.Create(ctx, ns))
	defer func() { _ = env.Client.Delete(ctx, ns) }()
	// Group 1 is a Deployment that becomes ready on our signal; group 2 has n pods.
	first := deployment(ns.Name, "first", member("first", 1))
	must(b, env.Client.Create(ctx, first))
	second := deployment(ns.Name, "second", member("second", 2))
	must(b, env.Client.Create(ctx, second))
	w, err := cs.CoreV1().Pods(ns.Name).Watch(ctx, metav1.ListOptions{})
	must(b, err)
	defer w.Stop()
	for i := range n {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("second-%d", i), Namespace: ns.Name,
			Labels: second.Spec.Template.Labels, OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet",
				Name: "second-rs", UID: second.UID, Controller: new(true)}}}, Spec: podSpec("web")}
		p.Labels = map[string]string{keys.GroupLabel: "second", keys.GroupOrderLabel: "2", "pod-template-hash": "h"}
		must(b, env.Client.Create(ctx, p))
	}
	var seq = ns.Name
	var jobName string
	for jobName == "" {
		s := &wavev1.Sequence{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: sequence.ObjectName(seq)}, s); err == nil && len(s.Status.Groups) > 0 {
			jobName = s.Status.Groups[0].WaitJob
		}
		time.Sleep(5 * time.Millisecond)
	}
	jobNS, jobN, _ := strings.Cut(jobName, "/")
	markDeploymentReadyB(b, first)
	ungated := map[string]bool{}
	var last time.Time
	for len(ungated) < n {
		ev := <-w.ResultChan()
		if ev.Type != watch.Modified {
			continue
		}
		p := ev.Object.(*corev1.Pod)
		if len(p.Spec.SchedulingGates) == 0 && p.Labels[keys.GroupLabel] == "second" && !ungated[p.Name] {
			ungated[p.Name] = true
			last = time.Now()
		}
	}
	done := runner.CompletedAt(jobNS, jobN)
	if done.IsZero() {
		b.Fatalf("the wait Job %s completed without the runner", jobName)
	}
	return last.Sub(done)
}

func markDeploymentReadyB(b *testing.B, d *appsv1.Deployment) {
	t := &testing.T{}
	markDeploymentReady(t, d)
	if t.Failed() {
		b.Fatal("marking the Deployment ready failed")
	}
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWaiterDetection measures the time from the last member becoming ready to the waiter
// returning.
func BenchmarkWaiterDetection(b *testing.B) {
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(env.Config)
	checker, _ := readiness.NewChecker(wavev1.Readiness{})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	must(b, env.Client.Create(ctx, ns))
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		d := deployment(ns.Name, fmt.Sprintf("d%d", i), nil)
		must(b, env.Client.Create(ctx, d))
		out := &syncBuffer{}
		done := make(chan time.Time, 1)
		go func() {
			_ = waiter.Wait(ctx, dyn, waiter.Options{Sequence: "s", Group: "g", Checker: checker, Out: out,
				Members: []waiter.Member{{GVR: appsv1.SchemeGroupVersion.WithResource("deployments"), Namespace: ns.Name, Name: d.Name}}})
			done <- time.Now()
		}()
		for !strings.Contains(out.String(), "0/1 ready") {
			time.Sleep(time.Millisecond)
		}
		start := time.Now()
		markDeploymentReadyB(b, d)
		lat = append(lat, (<-done).Sub(start))
	}
	reportLatencies(b, lat)
}

type syncBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func (s *syncBuffer) lock() {
	if s.mu == nil {
		s.mu = make(chan struct{}, 1)
	}
	s.mu <- struct{}{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.lock()
	defer func() { <-s.mu }()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.lock()
	defer func() { <-s.mu }()
	return s.buf.String()
}
