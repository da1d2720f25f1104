//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"

	"wavegate.io/wavegate/pkg/patch"
	"wavegate.io/wavegate/pkg/sequence"
)

// chainApp is a namespace with groups one-Deployment groups, group orders 0..groups-1, applied in
// one kubectl apply: the last group has lastReplicas pods, the others 2. With lastGate, the last
// group's template carries that scheduling gate (the gate-only run, not opted in).
func chainApp(ns string, optedIn bool, groups, lastReplicas int, lastGate string) string {
	var b strings.Builder
	label := ""
	if optedIn {
		label = `, labels: {wavegate.io/enabled: "true"}`
	}
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Namespace\nmetadata: {name: %s%s}\n", ns, label)
	for i := range groups {
		replicas, gates := 2, ""
		if i == groups-1 {
			replicas = lastReplicas
			if lastGate != "" {
				gates = fmt.Sprintf(", schedulingGates: [{name: %s}]", lastGate)
			}
		}
		fmt.Fprintf(&b, `---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: g%[2]d
  namespace: %[1]s
  labels: {wavegate.io/group: g%[2]d, wavegate.io/group-order: "%[2]d"}
spec:
  replicas: %[3]d
  selector: {matchLabels: {app: g%[2]d}}
  template:
    metadata: {labels: {app: g%[2]d}}
    spec: {containers: [{name: c, image: app}]%[4]s}
`, ns, i, replicas, gates)
	}
	return b.String()
}

// podTimes records, from a watch, when each pod of a namespace was first seen without wavegate's
// gate or the benchmark's (released: for a pod that was never gated, when it was created) and
// first seen done, by group. A pod is done when it is Ready, or, if a Job owns it, when it has Succeeded (a Job's pod is
// Ready while it runs; its group is ready once the Job completes).
type podTimes struct {
	mu sync.Mutex
	// created is when each pod was first seen.
	created  map[string][]time.Time
	released map[string][]time.Time
	ready    map[string][]time.Time
	seen     map[string]bool
	readySet map[string]bool
}

// watchPods watches the pods of namespace ns, grouped by their app label.
func watchPods(ctx context.Context, t testing.TB, ns string) *podTimes {
	return watchPodsBy(ctx, t, ns, func(p *corev1.Pod) string { return p.Labels["app"] })
}

// watchPodsBy watches the pods of namespace ns, grouped by groupOf; pods of group "" are ignored.
func watchPodsBy(ctx context.Context, t testing.TB, ns string, groupOf func(*corev1.Pod) string) *podTimes {
	pt := &podTimes{created: map[string][]time.Time{}, released: map[string][]time.Time{}, ready: map[string][]time.Time{}, seen: map[string]bool{}, readySet: map[string]bool{}}
	w := watchNamespacePods(ctx, t, ns)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now, group := time.Now(), groupOf(p)
			if group == "" {
				continue
			}
			pt.mu.Lock()
			if _, ok := pt.seen[p.Name]; !ok {
				pt.seen[p.Name] = false
				pt.created[group] = append(pt.created[group], now)
			}
			if !pt.seen[p.Name] && !sequence.HasGate(p) && !hasSchedulingGate(p, benchGate) {
				pt.seen[p.Name] = true
				pt.released[group] = append(pt.released[group], now)
			}
			if podDone(p) && !pt.readySet[p.Name] {
				pt.readySet[p.Name] = true
				pt.ready[group] = append(pt.ready[group], now)
			}
			pt.mu.Unlock()
		}
	}()
	return pt
}

// benchGate is the scheduling gate the benchmark's runs without wavegate hold pods with (removeGates).
const benchGate = "bench.wavegate.io/hold"

func hasSchedulingGate(p *corev1.Pod, gate string) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == gate })
}

// watchNamespacePods watches the pods of a namespace from now on (see watchFromNow).
func watchNamespacePods(ctx context.Context, t testing.TB, ns string) watch.Interface {
	return watchFromNow(ctx, t,
		func(ctx context.Context, o metav1.ListOptions) (string, error) {
			list, err := cs.CoreV1().Pods(ns).List(ctx, o)
			if err != nil {
				return "", err
			}
			return list.ResourceVersion, nil
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Pods(ns).Watch(ctx, o)
		})
}

// watchFromNow watches from the resourceVersion a LIST returns, resuming from the last event seen
// when the API server closes the watch: it did, within a second, in runs with a hundred pods
// created at once on two cores, and a plain watch then missed the rest without an error.
func watchFromNow(ctx context.Context, t testing.TB, list func(context.Context, metav1.ListOptions) (string, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) watch.Interface {
	rv, err := list(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{WatchFuncWithContext: watchFn})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// podDone: Succeeded for a pod a Job owns, Ready for any other.
func podDone(p *corev1.Pod) bool {
	if slices.ContainsFunc(p.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "Job" }) {
		return p.Status.Phase == corev1.PodSucceeded
	}
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

// chainGroups is the group names of chainApp's pods: g0..g(groups-1).
func chainGroups(groups int) []string {
	out := make([]string, groups)
	for g := range groups {
		out[g] = fmt.Sprintf("g%d", g)
	}
	return out
}

// waitReady waits until every pod of every group of a chainApp is ready and returns when the last
// one was.
func (pt *podTimes) waitReady(t testing.TB, groups, lastReplicas int) time.Time {
	want := map[string]int{}
	for i, g := range chainGroups(groups) {
		want[g] = 2
		if i == groups-1 {
			want[g] = lastReplicas
		}
	}
	return pt.waitDone(t, want, 5*time.Minute)
}

// waitDone waits until at least want[group] pods of each group are done and returns when the last
// of them was.
func (pt *podTimes) waitDone(t testing.TB, want map[string]int, timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		pt.mu.Lock()
		complete, last := true, time.Time{}
		for g, n := range want {
			ts := pt.ready[g]
			complete = complete && len(ts) >= n
			for _, x := range ts {
				if x.After(last) {
					last = x
				}
			}
		}
		pt.mu.Unlock()
		if complete {
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	t.Fatalf("not every pod was done within %s: done %v, want %v", timeout, pt.ready, want)
	return time.Time{}
}

// boundaries returns, per group boundary of a chainApp, the time from the last pod of group i being
// ready to the first pod of group i+1 being released.
func (pt *podTimes) boundaries(groups int) []time.Duration {
	return pt.boundariesOf(chainGroups(groups))
}

// boundariesOf returns, for each pair of consecutive groups, the time from the last pod of the
// first being done to the first pod of the second being released (negative: released before the
// earlier group was done). Every group must have pods.
func (pt *podTimes) boundariesOf(groups []string) []time.Duration {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	var out []time.Duration
	for i := 0; i+1 < len(groups); i++ {
		ready := slices.MaxFunc(pt.ready[groups[i]], func(a, b time.Time) int { return a.Compare(b) })
		next := slices.MinFunc(pt.released[groups[i+1]], func(a, b time.Time) int { return a.Compare(b) })
		out = append(out, next.Sub(ready))
	}
	return out
}

// phases tells, in milliseconds from start, when the first and the last group of groups were
// created (first pod seen), released (first and last pod without the gate) and done (last pod):
// where a run's time goes, one line per run.
func (pt *podTimes) phases(start time.Time, groups []string) string {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	ms := func(ts []time.Time, last bool) string {
		if len(ts) == 0 {
			return "-"
		}
		t := slices.MinFunc(ts, time.Time.Compare)
		if last {
			t = slices.MaxFunc(ts, time.Time.Compare)
		}
		return fmt.Sprint(t.Sub(start).Milliseconds())
	}
	var b strings.Builder
	for i, g := range groups {
		if i > 0 && i < len(groups)-1 {
			continue
		}
		fmt.Fprintf(&b, "%s created %s-%s released %s-%s done %s; ", g,
			ms(pt.created[g], false), ms(pt.created[g], true), ms(pt.released[g], false), ms(pt.released[g], true), ms(pt.ready[g], true))
	}
	return strings.TrimSuffix(b.String(), "; ")
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// BenchmarkReleaseLatency applies chains of one-Deployment groups (2 pods each, the last one 2 or
// 100; a kwok node holds 110 pods) at once, in an opted-in namespace
// and in one that is not, on the local cluster (real kube-controller-manager and scheduler, kwok
// nodes, wait-Job pods run for real), and reports per group boundary the time from the last pod of
// a group being ready to the first pod of the next one being released (p50, p99), and the time
// wavegate adds per boundary: (time to every pod ready with wavegate - without) / boundaries, one
// value per iteration (p50, p99 over the iterations). Run with `make bench-release`.
//
// The 100-pod case also runs the app a third way, not opted in, with a scheduling gate in the last
// group's template that the benchmark removes from each pod the moment it sees it (removeGates):
// what a gate per pod costs on its own that day, with no webhook, no ordering and no wavegate, the
// floor under wavegate's figure (gate-only-added). And a fourth way, the same but with the gates
// removed only once every pod of the earlier groups is Ready (ideal-order-added): an ordering
// controller that knows the moment a group is ready and needs no webhook, no settle, no waiter and no
// read before it releases the next, the floor under any release by scheduling gates that day.
func BenchmarkReleaseLatency(b *testing.B) {
	for _, c := range []struct{ groups, replicas int }{{3, 2}, {10, 2}, {30, 2}, {2, 100}} {
		b.Run(fmt.Sprintf("groups=%d/last=%d", c.groups, c.replicas), func(b *testing.B) {
			modes := []string{"without", "with"}
			if c.replicas == 100 {
				modes = append(modes, "gate-only", "ideal-order")
			}
			var all []time.Duration
			added := map[string][]time.Duration{}
			var phases []string
			pids := clusterPIDs()
			cpu := map[string]cpuUse{}
			for i := range b.N {
				elapsed := map[string]time.Duration{}
				// Each iteration's watches and gate removers stop with it, also when it fails.
				ctx, cancel := context.WithCancel(context.Background())
				b.Cleanup(cancel)
				for _, mode := range modes {
					ns := fmt.Sprintf("bench-%d-%d-%d-%s", c.groups, c.replicas, i, mode)
					gate := ""
					switch mode {
					case "gate-only":
						gate = benchGate
						removeGates(ctx, b, ns, gate, 0)
					case "ideal-order":
						gate = benchGate
						removeGates(ctx, b, ns, gate, 2*(c.groups-1))
					}
					f := writeTemp(b, chainApp(ns, mode == "with", c.groups, c.replicas, gate))
					pt := watchPods(ctx, b, ns)
					before := sampleCPU(pids)
					start := time.Now()
					if out, err := exec.Command(kubectl, "apply", "-f", f).CombinedOutput(); err != nil {
						b.Fatalf("%v: %s", err, out)
					}
					elapsed[mode] = pt.waitReady(b, c.groups, c.replicas).Sub(start)
					phases = append(phases, fmt.Sprintf("iteration %d, %s, ms from the apply: %s", i, mode, pt.phases(start, chainGroups(c.groups))))
					if mode == "with" {
						all = append(all, pt.boundaries(c.groups)...)
					}
					cpu[mode] = cpu[mode].add(sampleCPU(pids).since(before))
					// Gone before the next run: one kwok node holds 110 pods.
					_ = exec.Command(kubectl, "delete", "namespace", ns, "--wait=true", "--timeout=120s").Run()
				}
				for _, mode := range modes[1:] {
					added[mode] = append(added[mode], (elapsed[mode]-elapsed["without"])/time.Duration(c.groups-1))
				}
				cancel()
			}
			// Each iteration's figure, for pooling runs: the p50 of one run of twenty moves by up to
			// 140 ms between runs of the same code on the 2-core machine.
			for _, mode := range modes[1:] {
				ms := make([]int64, len(added[mode]))
				for i, d := range added[mode] {
					ms[i] = d.Milliseconds()
				}
				b.Logf("added per boundary (ms), %s, by iteration: %v", mode, ms)
			}
			// To the output, not the log: the testing package keeps only ten lines of a benchmark's log.
			fmt.Printf("%s: where the runs' time went\n%s\n", b.Name(), strings.Join(phases, "\n"))
			b.ReportMetric(float64(percentile(all, 0.5).Milliseconds()), "p50-ms/boundary")
			b.ReportMetric(float64(percentile(all, 0.99).Milliseconds()), "p99-ms/boundary")
			b.ReportMetric(float64(percentile(added["with"], 0.5).Milliseconds()), "added-p50-ms/boundary")
			b.ReportMetric(float64(percentile(added["with"], 0.99).Milliseconds()), "added-p99-ms/boundary")
			for _, mode := range []string{"gate-only", "ideal-order"} {
				if len(added[mode]) > 0 {
					b.ReportMetric(float64(percentile(added[mode], 0.5).Milliseconds()), mode+"-added-p50-ms/boundary")
					b.ReportMetric(float64(percentile(added[mode], 0.99).Milliseconds()), mode+"-added-p99-ms/boundary")
				}
			}
			// What the runs cost (means per run): the cluster's CPU time, the API server's, and how
			// busy the machine was, without and with wavegate (and with the gate alone).
			for _, mode := range modes {
				u, n := cpu[mode], float64(b.N)
				b.ReportMetric(float64(u.cluster.Milliseconds())/n, "cpu-ms-"+mode)
				b.ReportMetric(float64(u.apiserver.Milliseconds())/n, "apiserver-cpu-ms-"+mode)
				b.ReportMetric(100*u.busy/n, "busy-pct-"+mode)
				b.Logf("CPU per run %s: %s", mode, u.perProcess(b.N))
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// removeGates plays a controller that releases pods as soon as it may: it removes gate from each pod
// of namespace ns as wavegate's manager does (a JSON patch that tests the pod's UID and the gate,
// then removes it, 64 in flight, the manager's client limits), until ctx ends. With after > 0 it holds the gated pods until that many
// pods without the gate are done (Ready), and releases them all then (the ideal ordering); with 0,
// each the moment it sees it. Either way it needs no webhook, no settle, no waiter and no read.
func removeGates(ctx context.Context, t testing.TB, ns, gate string, after int) {
	c := rest.CopyConfig(config)
	c.QPS, c.Burst = 100, 200
	client := kubernetes.NewForConfigOrDie(c)
	w := watchNamespacePods(ctx, t, ns)
	work := make(chan *corev1.Pod, 128)
	go func() {
		defer close(work)
		defer w.Stop()
		seen, done := map[string]bool{}, map[string]bool{}
		var held []*corev1.Pod
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if !hasSchedulingGate(p, gate) && podDone(p) {
				done[p.Name] = true
			}
			if !seen[p.Name] && hasSchedulingGate(p, gate) {
				seen[p.Name] = true
				held = append(held, p)
			}
			if len(done) >= after {
				for _, p := range held {
					work <- p
				}
				held = held[:0]
			}
		}
	}()
	for range 64 {
		go func() {
			for p := range work {
				i := slices.IndexFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == gate })
				body, err := patch.Marshal(patch.TestAndRemoveFrom(p.UID, "/spec/schedulingGates", i, map[string]string{"name": gate})...)
				if err == nil {
					err = retry.OnError(retry.DefaultBackoff, func(error) bool { return ctx.Err() == nil }, func() error {
						_, err := client.CoreV1().Pods(ns).Patch(ctx, p.Name, types.JSONPatchType, body, metav1.PatchOptions{})
						return err
					})
				}
				if err != nil && ctx.Err() == nil {
					t.Errorf("removing %s from pod %s/%s: %v", gate, ns, p.Name, err)
				}
			}
		}()
	}
}
