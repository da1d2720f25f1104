//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
)

func sequenceSummary() string {
	out, _ := exec.Command(kubectl, "get", "sequence", "shop", "-o", "jsonpath={.status.summary}").Output()
	return string(out)
}

// TestUpgradeOrderWithKubectl: with the app released, one command changes the database image and
// the web image. The web's new pods (a new ReplicaSet) are scheduled only after the database's new
// revision is ready; the old web pods keep serving meanwhile.
func TestUpgradeOrderWithKubectl(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	run(t, "apply", "-f", example("shop"))
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "-f", example("shop"), "--wait=true", "--timeout=90s").Run()
	})
	g.Eventually(sequenceSummary).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).
		Should(Equal("database 2/2 Released, migrate 1/1 Released, web 1/1 Released"))
	oldWeb, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	g.Expect(err).NotTo(HaveOccurred())

	log := recordReleases(t, "shop")
	run(t, "patch", "-n", "shop", "statefulset/db", "--type=json", `-p=[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"postgres:17"}]`)
	run(t, "patch", "-n", "shop", "deployment/web", "--type=json", `-p=[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"shop/web:2"}]`)

	g.Eventually(sequenceSummary).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).
		Should(Equal("database 2/2 Released, migrate 1/1 Released, web 1/1 Released"))
	// The database's newest wait Job is the barrier the new web pods waited for.
	jobs, err := cs.BatchV1().Jobs("shop").List(ctx, metav1.ListOptions{LabelSelector: keys.WaitGroupLabel + "=database"})
	g.Expect(err).NotTo(HaveOccurred())
	released := log.barriers(g, jobs.Items)["database"]
	g.Expect(released).NotTo(BeZero(), "the log saw no waiter of the database's new revision done")
	pods, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	g.Expect(err).NotTo(HaveOccurred())
	newPods, gatedPods := 0, 0
	for _, p := range pods.Items {
		if p.Spec.Containers[0].Image != "shop/web:2" {
			continue
		}
		newPods++
		// The first pod of the new template is gated and released; later pods of the same template
		// (the rolling update's next ones) start without a gate, as the template is then cleared:
		// they were created after the release. Either way the write that let the pod be scheduled
		// (the gate's removal, or the pod's creation) came after the database's waiter was done.
		at, gated := log.release(g, p)
		if gated {
			gatedPods++
		}
		g.Expect(at).To(BeNumerically(">", released),
			"new web pod %s was released at revision %d, before the database's new revision was released at revision %d", p.Name, at, released)
	}
	t.Logf("%d new web pods, %d of them gated and released by wavegate", newPods, gatedPods)
	g.Expect(newPods).To(BeNumerically(">", 0))
	// The old pods served until the new ones were ready: they were never deleted before that.
	for _, p := range oldWeb.Items {
		g.Expect(p.Spec.SchedulingGates).To(BeEmpty())
	}
}

// TestTimeoutPathWithKubectl: a group that never becomes ready (a custom resource nobody
// reconciles) times out through the Job controller's activeDeadlineSeconds; the group is TimedOut
// with a Warning, and the later group stays gated.
func TestTimeoutPathWithKubectl(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	run(t, "apply", "-f", example("widgets")+"/crd.yaml")
	run(t, "wait", "--for", "condition=Established", "crd/widgets.example.com", "--timeout=60s")
	manifest := `apiVersion: v1
kind: Namespace
metadata: {name: slow, labels: {wavegate.io/enabled: "true"}}
---
apiVersion: wavegate.io/v1alpha1
kind: WavePolicy
metadata: {name: slow}
spec:
  groups:
  - {name: slow-backend, order: 1, timeout: 5s}
  - {name: slow-frontend, order: 2}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: never-ready, namespace: slow, labels: {wavegate.io/group: slow-backend}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: frontend, namespace: slow, labels: {wavegate.io/group: slow-frontend}}
spec:
  replicas: 1
  selector: {matchLabels: {app: frontend}}
  template:
    metadata: {labels: {app: frontend}}
    spec:
      containers: [{name: web, image: frontend:1}]
`
	path := t.TempDir() + "/slow.yaml"
	g.Expect(os.WriteFile(path, []byte(manifest), 0o600)).To(Succeed())
	// The policy first, so that the groups it defines are known when the members arrive.
	g.Eventually(func() error { return exec.Command(kubectl, "apply", "-f", path).Run() }).WithTimeout(30 * time.Second).Should(Succeed())
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "delete", "-f", path, "--wait=true", "--timeout=60s").Run()
		_ = exec.Command(kubectl, "delete", "-f", example("widgets")+"/crd.yaml", "--wait=false").Run()
	})
	g.Eventually(func() string {
		out, _ := exec.Command(kubectl, "get", "sequence", "slow", "-o", "jsonpath={.status.summary}").Output()
		return string(out)
	}).WithTimeout(90 * time.Second).WithPolling(500 * time.Millisecond).Should(ContainSubstring("slow-backend 0/1 TimedOut"))
	pods, err := cs.CoreV1().Pods("slow").List(ctx, metav1.ListOptions{LabelSelector: "app=frontend"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.Items).NotTo(BeEmpty())
	for _, p := range pods.Items {
		g.Expect(gated(p)).To(BeTrue(), "frontend pod %s was released although its predecessor timed out", p.Name)
	}
	evs := run(t, "get", "events.events.k8s.io", "-n", "slow", "-o", "jsonpath={range .items[*]}{.type} {.reason}{\"\\n\"}{end}")
	g.Expect(evs).To(ContainSubstring("Warning GroupTimedOut"))
}

func gated(p corev1.Pod) bool { return sequence.HasGate(&p) }
