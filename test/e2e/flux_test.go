//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	kustomizations    = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	externalArtifacts = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "externalartifacts"}
)

// fluxSource serves dir as the ExternalArtifact name in namespace flux-system (bin/artifact stands
// in for source-controller, which does not build here), republishing it when dir changes. Its
// output goes to the test's stderr.
func fluxSource(t testing.TB, dir, name string) {
	t.Helper()
	fluxSourceTo(t, dir, name, os.Stderr)
}

// fluxSourceTo is fluxSource with the artifact server's output going to out.
func fluxSourceTo(t testing.TB, dir, name string, out io.Writer) {
	t.Helper()
	_ = exec.Command(kubectl, "create", "namespace", "flux-system").Run()
	a := exec.Command(filepath.Join(root, "bin", "artifact"), "-dir", dir, "-namespace", "flux-system", "-name", name, "-watch", "300ms")
	a.Stdout, a.Stderr = out, out
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Process.Kill(); _, _ = a.Process.Wait() })
}

// kustomization applies a Flux Kustomization of the artifact name, with wait (kstatus health of
// everything it applied) and prune.
func kustomization(t testing.TB, name string) {
	t.Helper()
	applyYAML(t, kustomizationYAML(name, name, "./"))
}

// kustomizationYAML is a Kustomization of path in the ExternalArtifact artifact, with wait and
// prune, depending on the Kustomizations dependsOn (each waits until they are Ready).
func kustomizationYAML(name, artifact, path string, dependsOn ...string) string {
	deps := ""
	for _, d := range dependsOn {
		deps += fmt.Sprintf("\n  - name: %s", d)
	}
	if deps != "" {
		deps = "\n  dependsOn:" + deps
	}
	return fmt.Sprintf(`apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: %s, namespace: flux-system}
spec:
  interval: 10m
  path: %s
  prune: true
  wait: true
  timeout: 3m
  sourceRef: {kind: ExternalArtifact, name: %s}%s
`, name, path, artifact, deps)
}

// kustomizationReady waits until a Kustomization is Ready at the artifact's current revision and
// returns that revision.
func kustomizationReady(t testing.TB, name string) string {
	t.Helper()
	var rev string
	NewWithT(t).Eventually(func(g Gomega) {
		ready, applied, err := kustomizationIsReady(name, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ready).To(BeTrue(), "not Ready at revision %s", applied)
		rev = applied
	}).WithTimeout(4*time.Minute).WithPolling(500*time.Millisecond).Should(Succeed(), "Kustomization %s", name)
	return rev
}

// kustomizationIsReady tells whether a Kustomization is Ready at the current revision of the
// ExternalArtifact artifact; it returns the revision it last applied.
func kustomizationIsReady(name, artifact string) (bool, string, error) {
	ctx := context.Background()
	u, err := dyn.Resource(kustomizations).Namespace("flux-system").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	art, err := dyn.Resource(externalArtifacts).Namespace("flux-system").Get(ctx, artifact, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	want, _, _ := unstructured.NestedString(art.Object, "status", "artifact", "revision")
	applied, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	ready := ""
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			ready = fmt.Sprint(m["status"])
		}
	}
	return want != "" && applied == want && ready == "True", applied, nil
}

// reconcileNow asks kustomize-controller to reconcile at once (as `flux reconcile` does) and waits
// until it has.
func reconcileNow(t *testing.T, name string) {
	t.Helper()
	at := time.Now().Format(time.RFC3339Nano)
	run(t, "annotate", "-n", "flux-system", "kustomization/"+name, "reconcile.fluxcd.io/requestedAt="+at, "--overwrite")
	NewWithT(t).Eventually(func(g Gomega) string {
		u, err := dyn.Resource(kustomizations).Namespace("flux-system").Get(context.Background(), name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		handled, _, _ := unstructured.NestedString(u.Object, "status", "lastHandledReconcileAt")
		return handled
	}).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Equal(at))
}

// fluxLog returns kustomize-controller's log.
func fluxLog(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".dev", "flux-kustomize-controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFluxAppliesInOrderWithoutDrift: the real Flux kustomize-controller applies examples/shop,
// unchanged, from one Kustomization with wait: true. Pods are released in group order and the
// Kustomization becomes Ready; repeated reconciles (server-side dry-run and apply, through
// wavegate's webhook) find no drift; removing a manifest prunes it; deleting the Kustomization
// deletes everything, namespace included, and nothing is stuck.
func TestFluxAppliesInOrderWithoutDrift(t *testing.T) {
	t.Parallel()
	requireEngine(t, "flux")
	g := NewWithT(t)
	ns := "flux-shop"
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "00-namespace.yaml"),
		fmt.Appendf(nil, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels: {wavegate.io/enabled: \"true\"}\n", ns), 0o644)).To(Succeed())
	for _, f := range []string{"database.yaml", "migrate.yaml", "web.yaml"} {
		b, err := os.ReadFile(filepath.Join(example("shop"), f))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(dir, f), []byte(strings.ReplaceAll(string(b), "namespace: shop", "namespace: "+ns)), 0o644)).To(Succeed())
	}
	fluxSource(t, dir, "shop")
	log := recordReleases(t, ns)
	start := time.Now()
	kustomization(t, "shop")
	kustomizationReady(t, "shop")
	t.Logf("Flux (wait: true) + wavegate: %s from Kustomization to Ready", time.Since(start).Round(100*time.Millisecond))
	checkReleaseOrder(t, ns, log)

	before := len(fluxLog(t))
	for range 3 {
		reconcileNow(t, "shop")
	}
	// Every reconcile logs its change set ("output": {"Deployment/flux-shop/web":"unchanged", ...}).
	applies := 0
	for _, line := range strings.Split(fluxLog(t)[before:], "\n") {
		if !strings.Contains(line, "server-side apply completed") || !strings.Contains(line, `"name": "shop"`) {
			continue
		}
		applies++
		g.Expect(line).To(ContainSubstring(`"Deployment/` + ns + `/web":"unchanged"`))
		g.Expect(line).NotTo(MatchRegexp(`"(configured|created)"`), "a reconcile changed an object: wavegate's mutation shows as drift")
	}
	g.Expect(applies).To(BeNumerically(">=", 3), "kustomize-controller logged no change sets")

	// Prune: web leaves the source.
	g.Expect(os.Remove(filepath.Join(dir, "web.yaml"))).To(Succeed())
	g.Eventually(func() bool {
		_, err := cs.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
		return err != nil
	}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(BeTrue(), "web was not pruned")
	kustomizationReady(t, "shop")

	run(t, "delete", "-n", "flux-system", "kustomization/shop", "--wait=true", "--timeout=120s")
	g.Eventually(func() bool {
		_, err := cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
		return err != nil
	}).WithTimeout(2*time.Minute).WithPolling(500*time.Millisecond).Should(BeTrue(), "namespace %s is stuck", ns)
}

// TestFluxDeletionKeepsTheOperator: a Kustomization holding an operator, its Widgets and their
// namespace (examples/widgets/app.yaml, unchanged). Flux deletes everything at once on the
// Kustomization's deletion (prune ignores order); wavegate holds the operator until its Widgets are
// gone, so the strict stand-in operator finalizes them and nothing is stuck.
func TestFluxDeletionKeepsTheOperator(t *testing.T) {
	t.Parallel()
	requireEngine(t, "flux")
	startWidgetOperator(t)
	g := NewWithT(t)
	ctx := context.Background()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(example("widgets"), "app.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "app.yaml"), b, 0o644)).To(Succeed())
	fluxSource(t, dir, "widgets")
	kustomization(t, "widgets")
	kustomizationReady(t, "widgets")
	waitSummary(t, "widgets", "instances 2/2 Released")

	start := time.Now()
	run(t, "delete", "-n", "flux-system", "kustomization/widgets", "--wait=true", "--timeout=120s")
	g.Eventually(func() bool {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "widgets", metav1.GetOptions{})
		return err != nil
	}).WithTimeout(2*time.Minute).WithPolling(500*time.Millisecond).Should(BeTrue(), "namespace widgets is stuck")
	// The namespace is gone, so no Widget was stranded in it: its deletion waits for all it holds.
	t.Logf("teardown time, Flux Kustomization deletion (operator, 2 Widgets, namespace): %s", time.Since(start).Round(100*time.Millisecond))
}
