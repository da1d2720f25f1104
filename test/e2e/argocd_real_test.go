//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var applications = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}

// requireEngine skips a test whose GitOps engine the local cluster does not run (make test-e2e
// runs them all; `make dev-up ENGINES=...` chooses).
func requireEngine(t testing.TB, engine string) {
	t.Helper()
	if !slices.Contains(strings.Fields(os.Getenv("ENGINES")), engine) {
		t.Skipf("the local cluster does not run %s (ENGINES=%q)", engine, os.Getenv("ENGINES"))
	}
}

// gitRepo makes a Git repository in a temporary directory with files (path -> content) committed,
// for Argo CD to sync from over file://.
func gitRepo(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	gitCommit(t, dir, files, nil, "initial")
	return dir
}

// gitCommit writes files, removes paths and commits.
func gitCommit(t testing.TB, dir string, files map[string]string, remove []string, msg string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range remove {
		git(t, dir, "rm", "-q", p)
	}
	git(t, dir, "add", "-A")
	git(t, dir, "-c", "user.name=e2e", "-c", "user.email=e2e@wavegate.io", "commit", "-q", "-m", msg)
}

func git(t testing.TB, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// application applies an Argo CD Application syncing path of a file:// repository automatically
// (prune and selfHeal), with Argo CD's cascade-deletion finalizer.
func application(t testing.TB, name, repo, path string, compareOptions string) {
	t.Helper()
	applyYAML(t, applicationYAML(name, repo, path, compareOptions))
	// A test that failed leaves nothing behind for the next run: the Application goes, with what
	// it synced (a test that passed has deleted it).
	t.Cleanup(func() {
		run(t, "delete", "-n", "argocd", "application/"+name, "--ignore-not-found", "--wait=true", "--timeout=120s")
	})
}

// applicationYAML is the Application application applies.
func applicationYAML(name, repo, path string, compareOptions string) string {
	annotations := ""
	if compareOptions != "" {
		annotations = fmt.Sprintf("\n  annotations: {argocd.argoproj.io/compare-options: %q}", compareOptions)
	}
	return fmt.Sprintf(`apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: %s
  namespace: argocd
  finalizers: [resources-finalizer.argocd.argoproj.io]%s
spec:
  project: default
  source: {repoURL: "file://%s", path: %s, targetRevision: main}
  destination: {server: "https://kubernetes.default.svc"}
  syncPolicy: {automated: {prune: true, selfHeal: true}}
`, name, annotations, repo, path)
}

type appState struct{ Sync, Health, Revision string }

func appStatus(g Gomega, name string) (appState, *unstructured.Unstructured) {
	u, err := dyn.Resource(applications).Namespace("argocd").Get(context.Background(), name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	sync, _, _ := unstructured.NestedString(u.Object, "status", "sync", "status")
	health, _, _ := unstructured.NestedString(u.Object, "status", "health", "status")
	rev, _, _ := unstructured.NestedString(u.Object, "status", "sync", "revision")
	return appState{sync, health, rev}, u
}

// waitSyncedHealthy waits until an Application is Synced and Healthy at the repository's HEAD.
func waitSyncedHealthy(t testing.TB, name, repo string) {
	t.Helper()
	head := strings.TrimSpace(gitOutput(t, repo, "rev-parse", "HEAD"))
	NewWithT(t).Eventually(func(g Gomega) appState {
		s, _ := appStatus(g, name)
		return s
	}).WithTimeout(4*time.Minute).WithPolling(500*time.Millisecond).Should(Equal(appState{"Synced", "Healthy", head}), "Application %s", name)
}

func gitOutput(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// refresh asks Argo CD to compare the Application again (as its UI's Refresh button does) and waits
// until it has (the controller removes the annotation).
func refresh(t *testing.T, name string) {
	t.Helper()
	run(t, "annotate", "-n", "argocd", "application/"+name, "argocd.argoproj.io/refresh=normal", "--overwrite")
	NewWithT(t).Eventually(func(g Gomega) bool {
		_, u := appStatus(g, name)
		_, pending := u.GetAnnotations()["argocd.argoproj.io/refresh"]
		return pending
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(BeFalse())
}

// syncCount is how many sync operations Argo CD has run for an Application.
func syncCount(g Gomega, name string) int {
	_, u := appStatus(g, name)
	h, _, _ := unstructured.NestedSlice(u.Object, "status", "history")
	return len(h)
}

// shopRepo is examples/shop in namespace ns, as a team keeps it in Git: no wavegate annotations.
func shopRepo(t *testing.T, ns string) string {
	t.Helper()
	files := map[string]string{"shop/00-namespace.yaml": fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels: {wavegate.io/enabled: \"true\"}\n", ns)}
	for _, f := range []string{"database.yaml", "migrate.yaml", "web.yaml"} {
		b, err := os.ReadFile(filepath.Join(example("shop"), f))
		if err != nil {
			t.Fatal(err)
		}
		files["shop/"+f] = strings.ReplaceAll(string(b), "namespace: shop", "namespace: "+ns)
	}
	return gitRepo(t, files)
}

// TestArgoCDSyncsInOrderAndStaysSynced: the real Argo CD application controller and repo server
// sync examples/shop, unchanged, from Git. Pods are released in group order; the Application is
// Synced and Healthy, and stays so over several refreshes with the default (three-way) diff and
// with server-side diff, although wavegate stamps annotations, gates and finalizers on the live
// objects; selfHeal never syncs again (wavegate's mutation is not drift). Deleting the Application
// (Argo CD's cascade, highest live wave first) leaves nothing behind.
func TestArgoCDSyncsInOrderAndStaysSynced(t *testing.T) {
	t.Parallel()
	requireEngine(t, "argocd")
	for _, diff := range []string{"default", "server-side"} {
		t.Run(diff, func(t *testing.T) {
			g := NewWithT(t)
			ns, compare := "argo-shop", ""
			if diff == "server-side" {
				ns, compare = "argo-shop-ssd", "ServerSideDiff=true"
			}
			repo := shopRepo(t, ns)
			log := recordReleases(t, ns)
			start := time.Now()
			application(t, ns, repo, "shop", compare)
			waitSyncedHealthy(t, ns, repo)
			t.Logf("Argo CD + wavegate: %s from Application to Synced and Healthy", time.Since(start).Round(100*time.Millisecond))
			checkReleaseOrder(t, ns, log)

			syncs := syncCount(g, ns)
			for range 3 {
				refresh(t, ns)
				s, _ := appStatus(g, ns)
				g.Expect(s.Sync).To(Equal("Synced"), "wavegate's live mutation shows as drift (%s diff)", diff)
				g.Expect(s.Health).To(Equal("Healthy"))
			}
			g.Expect(syncCount(g, ns)).To(Equal(syncs), "selfHeal synced again: it fights wavegate's mutation")

			run(t, "delete", "-n", "argocd", "application/"+ns, "--wait=true", "--timeout=120s")
			_, err := cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
			if err == nil {
				run(t, "wait", "--for=delete", "namespace/"+ns, "--timeout=60s")
			}
		})
	}
}

// ignoreWavegateFinalizer is the one Argo CD setting (argocd-cm, not an application manifest) that
// the default three-way diff needs when Git lists metadata.finalizers of a custom resource: Argo CD
// replaces such a list as a whole (custom resources have no strategic merge), so it would see
// wavegate's finalizer as drift. Built-in kinds merge finalizer lists and need nothing; neither
// does server-side diff, whose dry-run apply goes through wavegate's webhook too.
const ignoreWavegateFinalizer = `{"data":{"resource.customizations.ignoreDifferences.all":"jqPathExpressions:\n- '.metadata.finalizers[]? | select(. == \"wavegate.io/ordered-teardown\")'\n"}}`

// TestArgoCDPruneAndDeletionFollowGroups: an operator and its Widgets (examples/widgets/app.yaml,
// unchanged: the Widgets list their operator's finalizer in Git) synced by the real Argo CD, with
// the default diff (plus ignoreWavegateFinalizer) and with server-side diff. The Application stays
// Synced; removing a Widget from Git prunes it (foreground, Argo CD's default) while the operator
// keeps finalizing; deleting the Application deletes the live objects by the waves wavegate
// stamped, highest first, so the Widgets go before their operator and nothing is stuck on a
// finalizer. The stand-in operator finalizes Widgets only while its pod runs.
func TestArgoCDPruneAndDeletionFollowGroups(t *testing.T) {
	requireEngine(t, "argocd")
	startWidgetOperator(t)
	app, err := os.ReadFile(filepath.Join(example("widgets"), "app.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var keep, green []string
	for _, d := range strings.Split(string(app), "\n---\n") {
		if strings.Contains(d, "name: green") {
			green = append(green, d)
			continue
		}
		keep = append(keep, d)
	}
	for _, diff := range []string{"default", "server-side"} {
		t.Run(diff, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			compare := "ServerSideDiff=true"
			if diff == "default" {
				compare = ""
				run(t, "patch", "configmap", "argocd-cm", "-n", "argocd", "--type", "merge", "-p", ignoreWavegateFinalizer)
				t.Cleanup(func() {
					run(t, "patch", "configmap", "argocd-cm", "-n", "argocd", "--type", "json", "-p",
						`[{"op":"remove","path":"/data/resource.customizations.ignoreDifferences.all"}]`)
				})
			}
			g.Expect(green).To(HaveLen(1))
			repo := gitRepo(t, map[string]string{"widgets/app.yaml": strings.Join(keep, "\n---\n"), "widgets/green.yaml": green[0]})
			name := "widgets-" + diff
			application(t, name, repo, "widgets", compare)
			waitSyncedHealthy(t, name, repo)
			waitSummary(t, "widgets", "instances 2/2 Released")
			syncs := syncCount(g, name)
			refresh(t, name)
			s, _ := appStatus(g, name)
			g.Expect(s.Sync).To(Equal("Synced"), "wavegate's finalizer shows as drift (%s diff)", diff)
			g.Expect(syncCount(g, name)).To(Equal(syncs), "selfHeal synced again: it fights wavegate's mutation")

			// Prune: the Widget green leaves Git.
			gitCommit(t, repo, nil, []string{"widgets/green.yaml"}, "remove green")
			refresh(t, name)
			g.Eventually(func() bool {
				_, err := dyn.Resource(widgetsGVR).Namespace("widgets").Get(ctx, "green", metav1.GetOptions{})
				return err != nil
			}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(BeTrue(), "the pruned Widget is stuck")
			waitSyncedHealthy(t, name, repo)

			// Application deletion: Argo CD deletes by live wave, highest first, and waits for each wave.
			start := time.Now()
			run(t, "delete", "-n", "argocd", "application/"+name, "--wait=true", "--timeout=120s")
			t.Logf("teardown time, Argo CD Application deletion (%s diff; operator, Widget, namespace): %s", diff, time.Since(start).Round(100*time.Millisecond))
			list, err := dyn.Resource(widgetsGVR).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Items).To(BeEmpty(), "Widgets were stranded")
			_, err = cs.AppsV1().Deployments("widgets").Get(ctx, "widget-operator", metav1.GetOptions{})
			g.Expect(err).To(HaveOccurred(), "the operator outlived the Application")
			run(t, "delete", "namespace", "widgets", "--ignore-not-found", "--wait=true", "--timeout=60s")
		})
	}
}
