//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cpuSample is the CPU time used so far by each process of the local cluster (the control plane
// kwokctl started, wavegate's manager, and the pod runner with the waiters it ran and reaped), and
// by the whole machine, read from /proc. The release benchmark takes one before and one after each
// run, so that it reports how much CPU a run cost next to how long it took: on two cores the
// difference between the run with wavegate and the one without is bounded by the CPU they need.
type cpuSample struct {
	at time.Time
	// procs is per process name (kube-apiserver, manager, ...).
	procs map[string]time.Duration
	// busy and total are the machine's busy and all CPU time (every core), from /proc/stat.
	busy, total time.Duration
}

// clockTick is the unit of /proc's CPU times (USER_HZ).
var clockTick = func() time.Duration {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if hz, perr := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && perr == nil && hz > 0 {
		return time.Second / time.Duration(hz)
	}
	return 10 * time.Millisecond
}()

// clusterPIDs are the processes of `make dev-up`'s cluster, by name, from the pid files kwokctl
// and dev.sh write.
func clusterPIDs() map[string]int {
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(root, ".dev", "kwok", "clusters", "*", "pids", "*.pid"))
	files = append(files, filepath.Join(root, ".dev", "manager.pid"), filepath.Join(root, ".dev", "podrunner.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			out[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
		}
	}
	return out
}

func sampleCPU(pids map[string]int) cpuSample {
	s := cpuSample{at: time.Now(), procs: map[string]time.Duration{}}
	for name, pid := range pids {
		if d, err := procCPU(pid); err == nil {
			s.procs[name] = d
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		// cpu  user nice system idle iowait irq softirq steal ...
		line, _, _ := strings.Cut(string(b), "\n")
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseInt(f, 10, 64)
			d := time.Duration(v) * clockTick
			s.total += d
			if i != 3 && i != 4 { // idle, iowait
				s.busy += d
			}
		}
	}
	return s
}

// procCPU is a process's user and system time, with that of the children it waited for.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields start after its last ")".
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ticks int64
	for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}

// cpuUse is what a run cost between two samples.
type cpuUse struct {
	// cluster is the CPU time of the cluster's processes, apiserver that of kube-apiserver, procs
	// that of each.
	cluster, apiserver time.Duration
	procs              map[string]time.Duration
	// busy is the share of the machine's CPU that was in use (all processes, kubectl and this
	// test included).
	busy float64
}

func (s cpuSample) since(before cpuSample) cpuUse {
	u := cpuUse{procs: map[string]time.Duration{}}
	for name, d := range s.procs {
		if b, ok := before.procs[name]; ok {
			u.procs[name] = d - b
			u.cluster += d - b
			if name == "kube-apiserver" {
				u.apiserver += d - b
			}
		}
	}
	if total := s.total - before.total; total > 0 {
		u.busy = float64(s.busy-before.busy) / float64(total)
	}
	return u
}

// add sums two runs' use.
func (u cpuUse) add(v cpuUse) cpuUse {
	out := cpuUse{cluster: u.cluster + v.cluster, apiserver: u.apiserver + v.apiserver, busy: u.busy + v.busy, procs: map[string]time.Duration{}}
	for _, m := range []map[string]time.Duration{u.procs, v.procs} {
		for name, d := range m {
			out.procs[name] += d
		}
	}
	return out
}

// perProcess lists the mean CPU time per run of each process, over n runs.
func (u cpuUse) perProcess(n int) string {
	names := slices.Sorted(maps.Keys(u.procs))
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %d ms", name, (u.procs[name] / time.Duration(n)).Milliseconds())
	}
	return strings.Join(parts, ", ")
}
