//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// The side-by-side comparison of issue 13: examples/shop (a database StatefulSet and its Service, a
// migrate Job, a web Deployment of 2 pods: three groups) deployed by the real Argo CD and Flux,
// once ordered the way teams do it today with each engine's own means, once ordered by wavegate
// from the unchanged manifests. Run with `make bench-engines`.

// shopGroups are examples/shop's groups in their order, and shopPods how many pods each has.
var (
	shopGroups = []string{"database", "migrate", "web"}
	shopPods   = map[string]int{"database": 1, "migrate": 1, "web": 2}
)

// shopGroupOf tells the group of a pod of examples/shop from its name (db-0, migrate-<id>,
// web-<hash>-<id>); wait-Job pods, wavegate's (wavegate-wait-...) or hand-written (wait-...),
// belong to none.
func shopGroupOf(p *corev1.Pod) string {
	for prefix, group := range map[string]string{"db-": "database", "migrate-": "migrate", "web-": "web"} {
		if strings.HasPrefix(p.Name, prefix) {
			return group
		}
	}
	return ""
}

// shopGroupLabel is the line of examples/shop that puts an object in a wavegate group.
var shopGroupLabel = regexp.MustCompile(`(?m)^  labels: \{wavegate\.io/group: ([a-z]+), wavegate\.io/group-order: "([0-9]+)"\}\n`)

// shopFile reads examples/shop/<name> with its namespace set to ns, and rewrites wavegate's group
// label line with label(group, order): "" removes it.
func shopFile(t testing.TB, name, ns string, label func(group string, order int) string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(example("shop"), name))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), "namespace: shop", "namespace: "+ns)
	if label == nil {
		return s
	}
	if !shopGroupLabel.MatchString(s) {
		t.Fatalf("examples/shop/%s has no group label line %s", name, shopGroupLabel)
	}
	s = shopGroupLabel.ReplaceAllStringFunc(s, func(line string) string {
		m := shopGroupLabel.FindStringSubmatch(line)
		order, _ := strconv.Atoi(m[2])
		return label(m[1], order)
	})
	if strings.Contains(s, "wavegate.io") {
		t.Fatalf("examples/shop/%s still names wavegate after rewriting:\n%s", name, s)
	}
	return s
}

// shopWavegate is examples/shop as it is: plain manifests with wavegate's group labels, in a
// namespace that opts in. dir prefixes the file names.
func shopWavegate(t testing.TB, ns, dir string) map[string]string {
	files := map[string]string{dir + "00-namespace.yaml": fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels: {wavegate.io/enabled: \"true\"}\n", ns)}
	for _, f := range []string{"database.yaml", "migrate.yaml", "web.yaml"} {
		files[dir+f] = shopFile(t, f, ns, nil)
	}
	return files
}

// shopWaiterScript is what each group's hand-written wait Job runs (seed 000: `kubectl rollout
// status` per workload, `kubectl wait` for a Job).
var shopWaiterScript = map[string]string{
	"database": "kubectl rollout status statefulset/db -n %s --timeout=15m",
	"migrate":  "kubectl wait --for=condition=complete job/migrate -n %s --timeout=15m",
	"web":      "kubectl rollout status deployment/web -n %s --timeout=15m",
}

// shopArgoCDWaves is examples/shop as teams order it for Argo CD today (seed 000): the same
// workloads without wavegate's labels, each group in sync wave order x 100, and per group a wait
// Job as a Sync hook in wave order x 100 + 50 (deleted once it succeeds) that runs `kubectl rollout
// status` with its own ServiceAccount and Role. The namespace and the waiters' RBAC go with the
// first group (wave 100), so that no wave is added for them. The namespace does not opt in.
func shopArgoCDWaves(t testing.TB, ns string) map[string]string {
	files := shopArgoCDWavesOnly(t, ns)
	for i, f := range []string{"database.yaml", "migrate.yaml", "web.yaml"} {
		group := shopGroups[i]
		files["app/wait-"+f] = fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: wait-%[2]s
  namespace: %[1]s
  annotations:
    argocd.argoproj.io/hook: Sync
    argocd.argoproj.io/hook-delete-policy: HookSucceeded
    argocd.argoproj.io/sync-wave: "%[3]d"
spec:
  ttlSecondsAfterFinished: 300
  backoffLimit: 3
  template:
    metadata:
      # Only for the local cluster: its pod runner runs this pod's command for real (kwok would
      # fake the completion of any Job's pod at once).
      labels: {dev.wavegate.io/exec: "true"}
    spec:
      restartPolicy: Never
      serviceAccountName: wait-reader
      containers:
      - name: wait
        image: bitnami/kubectl:latest
        command: [sh, -c]
        args: [%[4]q]
`, ns, group, (i+1)*100+50, fmt.Sprintf(shopWaiterScript[group], ns))
	}
	files["app/wait-rbac.yaml"] = fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: wait-reader
  namespace: %[1]s
%[2]s---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: wait-reader
  namespace: %[1]s
%[2]srules:
- apiGroups: [apps]
  resources: [deployments, statefulsets, daemonsets]
  verbs: [get, list, watch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: wait-reader
  namespace: %[1]s
%[2]sroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: wait-reader}
subjects: [{kind: ServiceAccount, name: wait-reader, namespace: %[1]s}]
`, ns, argoWave(100))
	return files
}

// argoWave is the annotations line that puts an object of examples/shop in Argo CD sync wave w.
func argoWave(w int) string {
	return fmt.Sprintf("  annotations: {argocd.argoproj.io/sync-wave: %q}\n", strconv.Itoa(w))
}

// shopArgoCDWavesOnly is examples/shop ordered by sync waves alone (order x 100), without
// wavegate's labels or wait Jobs: Argo CD applies a wave once the previous one is healthy by its
// own health checks. The namespace goes with the first group and does not opt in.
func shopArgoCDWavesOnly(t testing.TB, ns string) map[string]string {
	files := map[string]string{"app/00-namespace.yaml": fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n%s", ns, argoWave(100))}
	for _, f := range []string{"database.yaml", "migrate.yaml", "web.yaml"} {
		files["app/"+f] = shopFile(t, f, ns, func(_ string, order int) string { return argoWave(order * 100) })
	}
	return files
}

// shopFluxChain is examples/shop as teams order it for Flux today: one directory per group (the
// namespace with the first), the same workloads without wavegate's labels, for one Kustomization
// per group; the namespace does not opt in.
func shopFluxChain(t testing.TB, ns string) map[string]string {
	files := map[string]string{"database/00-namespace.yaml": fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", ns)}
	for i, f := range []string{"database.yaml", "migrate.yaml", "web.yaml"} {
		files[shopGroups[i]+"/"+f] = shopFile(t, f, ns, func(string, int) string { return "" })
	}
	return files
}

// engineRun is what one deployment measured: from creating the Application or the Kustomizations
// to the engine reporting done, and to the last pod of the app being done (Ready, or Succeeded for
// the migrate Job's pod); and per group boundary, from the last pod of a group being done to the
// first pod of the next one being released to the scheduler (created, where nothing gates it).
type engineRun struct {
	done, podsDone time.Duration
	boundaries     []time.Duration
}

var benchRuns atomic.Int32

// benchName is a name for one run's namespace (also its Application or artifact): unique within
// the process, so that -count and b.N never reuse a namespace that may still be terminating.
func benchName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, benchRuns.Add(1))
}

// quietDyn is a dynamic client that drops the API server's warnings (client-go would print them
// between the benchmark's result lines; Argo CD's finalizer name draws one).
var quietDyn = sync.OnceValue(func() dynamic.Interface {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	cfg.WarningHandler = rest.NoWarnings{}
	return dynamic.NewForConfigOrDie(cfg)
})

// createYAML creates objects of resource r from YAML documents with the API (not kubectl: its start
// would be timed).
func createYAML(t testing.TB, r schema.GroupVersionResource, docs ...string) {
	t.Helper()
	for _, d := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(d), &u.Object); err != nil {
			t.Fatal(err)
		}
		if _, err := quietDyn().Resource(r).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// pollUntil waits (polling every 100 ms) until cond holds and returns when it was first seen to.
func pollUntil(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) time.Time {
	t.Helper()
	NewWithT(t).Eventually(cond).WithTimeout(timeout).WithPolling(100*time.Millisecond).Should(BeTrue(), what)
	return time.Now()
}

// argoCDDone tells whether an Application is Synced and Healthy at revision head and its sync
// operation (hooks included) has succeeded.
func argoCDDone(name, head string) (bool, error) {
	u, err := dyn.Resource(applications).Namespace("argocd").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	sync, _, _ := unstructured.NestedString(u.Object, "status", "sync", "status")
	health, _, _ := unstructured.NestedString(u.Object, "status", "health", "status")
	rev, _, _ := unstructured.NestedString(u.Object, "status", "sync", "revision")
	phase, _, _ := unstructured.NestedString(u.Object, "status", "operationState", "phase")
	return sync == "Synced" && health == "Healthy" && rev == head && phase == "Succeeded", nil
}

// measure watches the pods of namespace ns, calls deploy (which starts the engine and returns when
// the engine reports done), and returns the run's figures. The order of the groups is checked:
// no group's first pod may be released before the last pod of the group before it is done.
func measure(t testing.TB, ns string, deploy func() (start, done time.Time)) engineRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pt := watchPodsBy(ctx, t, ns, shopGroupOf)
	start, done := deploy()
	last := pt.waitDone(t, shopPods, 2*time.Minute)
	r := engineRun{done: done.Sub(start), podsDone: last.Sub(start), boundaries: pt.boundariesOf(shopGroups)}
	for i, d := range r.boundaries {
		if d <= 0 {
			t.Errorf("group %s was released %s before group %s was done", shopGroups[i+1], -d, shopGroups[i])
		}
	}
	return r
}

// argoCDRun syncs files from a new Git repository with an Application named ns (path app) and
// measures it; then deletes the Application (cascade) and waits until namespace ns is gone.
func argoCDRun(t testing.TB, ns string, files map[string]string) engineRun {
	t.Helper()
	repo := gitRepo(t, files)
	head := strings.TrimSpace(gitOutput(t, repo, "rev-parse", "HEAD"))
	r := measure(t, ns, func() (time.Time, time.Time) {
		start := time.Now()
		createYAML(t, applications, applicationYAML(ns, repo, "app", ""))
		return start, pollUntil(t, 4*time.Minute, "Application "+ns+" Synced, Healthy and its sync Succeeded",
			func() (bool, error) { return argoCDDone(ns, head) })
	})
	run(t, "delete", "-n", "argocd", "application/"+ns, "--wait=true", "--timeout=180s")
	waitNamespaceGone(t, ns)
	return r
}

// checkWaitersRan proves that the hand-written wait Jobs of namespace ns (their pods are gone:
// Argo CD deleted the hooks) were run for real by the local cluster's pod runner, not faked by
// kwok: each left the output of its kubectl command in .dev/pods/.
func checkWaitersRan(t testing.TB, ns string) {
	t.Helper()
	for _, g := range shopGroups {
		logs, err := filepath.Glob(filepath.Join(root, ".dev", "pods", ns+"_wait-"+g+"-*.log"))
		if err != nil || len(logs) == 0 {
			t.Fatalf("the wait Job of group %s did not run for real (no log in .dev/pods/): %v", g, err)
		}
		out, err := os.ReadFile(logs[len(logs)-1])
		if err != nil || len(strings.TrimSpace(string(out))) == 0 {
			t.Fatalf("the wait Job of group %s printed nothing: %v", g, err)
		}
		t.Logf("wait Job of group %s (%d pod(s)): %s", g, len(logs), strings.TrimSpace(string(out)))
	}
}

// fluxRun publishes files as the ExternalArtifact ns, then creates the Kustomizations (name ->
// YAML) at once and measures until every one is Ready; then deletes them (prune) and waits until
// namespace ns is gone.
func fluxRun(t testing.TB, ns string, files map[string]string, ks map[string]string) engineRun {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The server's output goes to a file, not into the benchmark's result lines.
	out, err := os.Create(filepath.Join(t.TempDir(), "artifact.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = out.Close() })
	fluxSourceTo(t, dir, ns, out)
	// The source is published before the clock starts (source-controller would have fetched it).
	pollUntil(t, time.Minute, "ExternalArtifact "+ns+" published", func() (bool, error) {
		u, err := dyn.Resource(externalArtifacts).Namespace("flux-system").Get(context.Background(), ns, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		rev, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "revision")
		return rev != "", nil
	})
	names := slices.Sorted(maps.Keys(ks))
	r := measure(t, ns, func() (time.Time, time.Time) {
		start := time.Now()
		for _, n := range names {
			createYAML(t, kustomizations, ks[n])
		}
		return start, pollUntil(t, 4*time.Minute, "Kustomizations "+strings.Join(names, ", ")+" Ready", func() (bool, error) {
			for _, n := range names {
				if ready, _, err := kustomizationIsReady(n, ns); !ready {
					return false, err
				}
			}
			return true, nil
		})
	})
	run(t, append([]string{"delete", "-n", "flux-system", "--wait=true", "--timeout=180s"}, prefixAll("kustomization/", names)...)...)
	waitNamespaceGone(t, ns)
	return r
}

func prefixAll(prefix string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = prefix + s
	}
	return out
}

func waitNamespaceGone(t testing.TB, ns string) {
	t.Helper()
	pollUntil(t, 3*time.Minute, "namespace "+ns+" gone", func() (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// BenchmarkEngines deploys examples/shop (3 groups: database, migrate, web) with the real Argo CD
// and Flux on the local cluster, side by side:
//
//   - argocd/sync-waves+hook-jobs: Argo CD's native order as teams write it today (seed 000): sync
//     waves 100/200/300 and a wait Job per group as a Sync hook in waves 150/250/350 running
//     `kubectl rollout status` (for real, by the local cluster's pod runner), with its RBAC; the
//     namespace does not opt in to wavegate. Argo CD's wave delay is its default (2 s).
//   - argocd/sync-waves: the same waves without the wait Jobs (Argo CD's own health checks only).
//   - argocd/wavegate: the unchanged manifests (group labels, one wave), namespace opted in.
//   - flux/dependsOn-chain: one Kustomization per group, each with wait: true, chained with
//     dependsOn, all created at once; kustomize-controller runs with its defaults
//     (--requeue-dependency 30s), as test/tools/dev/flux.sh starts it.
//   - flux/wavegate: one Kustomization (wait: true) of the unchanged manifests.
//
// Reported per run (the median over b.N): s/done, from creating the Application or the
// Kustomizations to the engine reporting done (Argo CD: Synced, Healthy and the sync operation,
// hooks included, Succeeded; Flux: every Kustomization Ready at the artifact's revision);
// s/pods-done, to the last pod of the app done (Ready, or Succeeded for the migrate Job's pod);
// ms/database-migrate and ms/migrate-web, per group boundary from the pod watch: the last pod of a
// group done -> the first pod of the next group released to the scheduler (created, where nothing
// gates it). Run with `make bench-engines`.
func BenchmarkEngines(b *testing.B) {
	type variant struct {
		name string
		run  func(b *testing.B) engineRun
	}
	engines := []struct {
		engine   string
		variants []variant
	}{
		{"argocd", []variant{
			{"sync-waves+hook-jobs", func(b *testing.B) engineRun {
				ns := benchName("bench-argocd-waves")
				r := argoCDRun(b, ns, shopArgoCDWaves(b, ns))
				checkWaitersRan(b, ns)
				return r
			}},
			{"sync-waves", func(b *testing.B) engineRun {
				ns := benchName("bench-argocd-wavesonly")
				return argoCDRun(b, ns, shopArgoCDWavesOnly(b, ns))
			}},
			{"wavegate", func(b *testing.B) engineRun {
				ns := benchName("bench-argocd-wavegate")
				return argoCDRun(b, ns, shopWavegate(b, ns, "app/"))
			}},
		}},
		{"flux", []variant{
			{"dependsOn-chain", func(b *testing.B) engineRun {
				ns := benchName("bench-flux-chain")
				ks := map[string]string{}
				for i, g := range shopGroups {
					var deps []string
					if i > 0 {
						deps = append(deps, ns+"-"+shopGroups[i-1])
					}
					ks[ns+"-"+g] = kustomizationYAML(ns+"-"+g, ns, "./"+g, deps...)
				}
				return fluxRun(b, ns, shopFluxChain(b, ns), ks)
			}},
			{"wavegate", func(b *testing.B) engineRun {
				ns := benchName("bench-flux-wavegate")
				return fluxRun(b, ns, shopWavegate(b, ns, ""), map[string]string{ns: kustomizationYAML(ns, ns, "./")})
			}},
		}},
	}
	for _, e := range engines {
		b.Run(e.engine, func(b *testing.B) {
			requireEngine(b, e.engine)
			for _, v := range e.variants {
				b.Run(v.name, func(b *testing.B) {
					var done, podsDone []time.Duration
					bounds := make([][]time.Duration, len(shopGroups)-1)
					for range b.N {
						r := v.run(b)
						b.Logf("done %s, pods done %s, boundaries %v", r.done.Round(time.Millisecond), r.podsDone.Round(time.Millisecond), r.boundaries)
						done, podsDone = append(done, r.done), append(podsDone, r.podsDone)
						for i, d := range r.boundaries {
							bounds[i] = append(bounds[i], d)
						}
					}
					b.ReportMetric(percentile(done, 0.5).Seconds(), "s/done")
					b.ReportMetric(percentile(podsDone, 0.5).Seconds(), "s/pods-done")
					for i, ds := range bounds {
						b.ReportMetric(float64(percentile(ds, 0.5).Milliseconds()), "ms/"+shopGroups[i]+"-"+shopGroups[i+1])
					}
					b.ReportMetric(0, "ns/op")
				})
			}
		})
	}
}
