//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
)

// TestOneSequenceAcrossHelmAndArgoCD: a database installed by the Helm CLI in namespace ct-db and
// the app synced by Argo CD in namespace ct-app join one sequence that the platform declares for
// both namespaces, with the database group required (the app waits for it even before it exists).
// Argo CD syncs first, Helm installs a moment later, tools that know nothing of each other; the
// app's pods are released only after the database's waiter succeeded.
func TestOneSequenceAcrossHelmAndArgoCD(t *testing.T) {
	t.Parallel()
	requireEngine(t, "argocd")
	g := NewWithT(t)
	ctx := context.Background()
	applyYAML(t, `apiVersion: wavegate.io/v1alpha1
kind: WavePolicy
metadata: {name: cross-tool}
spec:
  namespaceSelector: {matchLabels: {team: cross-tool}}
  groups:
  - {name: database, order: 1, required: true}  # the app waits for it even before Helm created it
  - {name: web, order: 2}
  sequences:
  - name: cross-tool
    namespaceSelector: {matchLabels: {team: cross-tool}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ct-db, labels: {wavegate.io/enabled: "true", team: cross-tool}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ct-app, labels: {wavegate.io/enabled: "true", team: cross-tool}}
`)
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "namespace", "ct-db", "ct-app", "--ignore-not-found", "--wait=true", "--timeout=120s").Run()
		_ = exec.Command(kubectl, "delete", "wavepolicy", "cross-tool", "--ignore-not-found").Run()
	})

	// The database, as a Helm chart.
	chart := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(chart, "Chart.yaml"), []byte("apiVersion: v2\nname: database\nversion: 0.1.0\n"), 0o644)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(chart, "templates"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(chart, "templates", "db.yaml"), []byte(`apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  labels: {wavegate.io/group: database, wavegate.io/group-order: "1", wavegate.io/sequence: cross-tool}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: example.com/db:1}]
`), 0o644)).To(Succeed())
	// The app, in Git for Argo CD.
	repo := gitRepo(t, map[string]string{"app/web.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: ct-app
  labels: {wavegate.io/group: web, wavegate.io/group-order: "2", wavegate.io/sequence: cross-tool}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: example.com/web:1}]
`})
	log := recordReleases(t, "ct-app", "ct-db")
	application(t, "ct-app", repo, "app", "")
	// Argo CD has synced the app before Helm runs: its pods wait, gated, for a database that does
	// not exist yet.
	gatedWeb := func(g Gomega) int {
		pods, err := cs.CoreV1().Pods("ct-app").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		g.Expect(err).NotTo(HaveOccurred())
		n := 0
		for _, p := range pods.Items {
			if sequence.HasGate(&p) {
				n++
			}
		}
		return n
	}
	g.Eventually(gatedWeb).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Equal(2))
	g.Consistently(gatedWeb).WithTimeout(1500 * time.Millisecond).WithPolling(100 * time.Millisecond).Should(Equal(2))
	helm := exec.Command(filepath.Join(os.Getenv("KUBE_BIN"), "helm"), "install", "db", chart, "--namespace", "ct-db",
		"--kubeconfig", os.Getenv("KUBECONFIG"), "--wait", "--timeout", "3m")
	out, err := helm.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "helm install: %s", out)
	t.Cleanup(func() {
		_ = exec.Command(filepath.Join(os.Getenv("KUBE_BIN"), "helm"), "uninstall", "db", "--namespace", "ct-db", "--kubeconfig", os.Getenv("KUBECONFIG")).Run()
	})
	waitSyncedHealthy(t, "ct-app", repo)
	waitSummary(t, "cross-tool", "database 1/1 Released, web 1/1 Released")

	jobs, err := cs.BatchV1().Jobs("ct-db").List(ctx, metav1.ListOptions{LabelSelector: keys.WaitJobLabel + "=true," + keys.WaitGroupLabel + "=database"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(jobs.Items).NotTo(BeEmpty(), "the database group's waiter runs beside its members")
	released := log.barriers(g, jobs.Items)["database"]
	g.Expect(released).NotTo(BeZero(), "the log saw no database waiter done")
	pods, err := cs.CoreV1().Pods("ct-app").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.Items).To(HaveLen(2))
	for _, p := range pods.Items {
		at, gated := log.release(g, p)
		g.Expect(gated).To(BeTrue(), "pod %s was never gated and released by wavegate", p.Name)
		g.Expect(at).To(BeNumerically(">", released),
			"web pod %s (Argo CD) was released at revision %d, before the database's waiter (Helm) was done at revision %d", p.Name, at, released)
	}
	run(t, "delete", "-n", "argocd", "application/ct-app", "--wait=true", "--timeout=120s")
}
