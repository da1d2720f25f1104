//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	"wavegate.io/wavegate/pkg/keys"
)

func TestZZTimeline(t *testing.T) {
	groups, _ := strconv.Atoi(os.Getenv("TL_GROUPS"))
	last, _ := strconv.Atoi(os.Getenv("TL_LAST"))
	modes := []bool{false, true}
	if os.Getenv("TL_ONLY") == "true" {
		modes = []bool{true}
	} else if os.Getenv("TL_ONLY") == "false" {
		modes = []bool{false}
	}
	for iter := 0; iter < 1; iter++ {
		for _, optedIn := range modes {
			ns := fmt.Sprintf("tl-%d-%v-%d", iter, optedIn, time.Now().Unix()%1000)
			f := writeTemp(t, chainApp(ns, optedIn, groups, last))
			ctx, cancel := context.WithCancel(context.Background())
			type ev struct {
				at   time.Duration
				what string
			}
			var mu sync.Mutex
			first := map[string]time.Duration{}
			lastT := map[string]time.Duration{}
			seen := map[string]bool{}
			w := watchNamespacePods(ctx, t, ns)
			if out, err := exec.Command(kubectl, "get", "--raw", "/metrics").Output(); err == nil {
				_ = os.WriteFile(fmt.Sprintf("/tmp/tl-metrics0-%v.txt", optedIn), out, 0o644)
			}
			cpu0 := cpuTicks()
			start := time.Now()
			mark := func(pod, key string) {
				k := pod + "|" + key
				if seen[k] {
					return
				}
				seen[k] = true
				d := time.Since(start)
				if _, ok := first[key]; !ok {
					first[key] = d
				}
				lastT[key] = d
			}
			go func() {
				for e := range w.ResultChan() {
					if e.Type == watch.Error {
						t.Logf("watch error: %v", e.Object)
					}
					if e.Type == watch.Deleted {
						continue
					}
					p, ok := e.Object.(*corev1.Pod)
					if !ok {
						continue
					}
					g := p.Labels["app"]
					if g == "" {
						g = "wait:" + p.Labels[keys.WaitGroupLabel]
					}
					mu.Lock()
					mark(p.Name, g+" created")
					if !slices.ContainsFunc(p.Spec.SchedulingGates, func(x corev1.PodSchedulingGate) bool { return x.Name == keys.SchedulingGate }) {
						mark(p.Name, g+" ungated")
					}
					if p.Spec.NodeName != "" {
						mark(p.Name, g+" bound")
					}
					if p.Status.Phase == corev1.PodRunning {
						mark(p.Name, g+" running")
					}
					if p.Status.Phase == corev1.PodSucceeded {
						mark(p.Name, g+" succeeded")
					}
					if podDone(p) {
						mark(p.Name, g+" ready")
					}
					mu.Unlock()
				}
				t.Logf("watch closed at %s", time.Since(start))
			}()
			if out, err := exec.Command(kubectl, "apply", "-f", f).CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			applied := time.Since(start)
			for {
				mu.Lock()
				n := 0
				for k := range seen {
					if strings.HasSuffix(k, " ready") && !strings.Contains(k, "wait:") {
						n++
					}
				}
				mu.Unlock()
				if n >= 2*(groups-1)+last {
					break
				}
				time.Sleep(20 * time.Millisecond)
				if time.Since(start) > 60*time.Second {
					t.Fatalf("n=%d seen=%d", n, len(seen))
				}
			}
			cpu1 := cpuTicks()
			if out, err := exec.Command(kubectl, "get", "--raw", "/metrics").Output(); err == nil {
				_ = os.WriteFile(fmt.Sprintf("/tmp/tl-metrics-%v.txt", optedIn), out, 0o644)
			}
			for k, v := range cpu1 {
				t.Logf("cpu %s %d ms", k, (v-cpu0[k])*10)
			}
			time.Sleep(500 * time.Millisecond)
			mu.Lock()
			var evs []ev
			for k, v := range first {
				evs = append(evs, ev{v, fmt.Sprintf("first %s (last %s)", k, lastT[k].Round(time.Millisecond))})
			}
			mu.Unlock()
			sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
			t.Logf("== %s optedIn=%v apply returned %s", ns, optedIn, applied.Round(time.Millisecond))
			for _, e := range evs {
				t.Logf("  %8s %s", e.at.Round(time.Millisecond), e.what)
			}
			cancel()
			_ = exec.Command(kubectl, "delete", "namespace", ns, "--wait=true", "--timeout=120s").Run()
		}
	}
}

func cpuTicks() map[string]int {
	out := map[string]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(cmd) == 0 {
			continue
		}
		name := filepath.Base(strings.SplitN(string(cmd), "\x00", 2)[0])
		switch name {
		case "kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok-controller", "wavegate", "podrunner", "e2e.test":
		default:
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		f := strings.Fields(string(st)[strings.LastIndex(string(st), ")")+2:])
		u, _ := strconv.Atoi(f[11])
		sy, _ := strconv.Atoi(f[12])
		out[name] += u + sy
	}
	return out
}
