package admission

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
)

func job(ns, name string, l map[string]string, suspend bool) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Spec: batchv1.JobSpec{
			Suspend: ptr.To(suspend),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
		},
	}
}

// TestImmutableTemplatesAreNotStamped: a Job's pod template is immutable unless the Job is
// suspended and has never started. A Job that existed before its namespace opted in, or whose group
// changes, is still updated: wavegate stamps its annotations and leaves the template with a
// warning, instead of failing the update (and every later one) with "field is immutable".
func TestImmutableTemplatesAreNotStamped(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c, w := clientWithWarnings(t)
	ns := namespace(t, false)
	member := labels(keys.GroupLabel, "migrate", keys.GroupOrderLabel, "1")
	running := job(ns, "running", member, false)
	suspended := job(ns, "suspended", member, true)
	for _, j := range []*batchv1.Job{running, suspended} {
		g.Expect(c.Create(ctx, j)).To(Succeed())
		g.Expect(j.Spec.Template.Labels).NotTo(HaveKey(keys.GroupLabel), "not opted in yet")
	}
	n := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: ns}, n)).To(Succeed())
	p := client.MergeFrom(n.DeepCopy())
	n.Labels[keys.EnabledLabel] = "true"
	g.Expect(c.Patch(ctx, n, p)).To(Succeed())

	// The webhook's cache of namespaces may lag the label: admission of the update is retried
	// until it stamps the Job's own annotations.
	g.Eventually(func(g Gomega) {
		p := client.MergeFrom(running.DeepCopy())
		running.Labels[keys.GroupLabel] = "migrations"
		g.Expect(c.Patch(ctx, running, p)).To(Succeed())
		g.Expect(running.Annotations).To(HaveKeyWithValue(keys.ResolvedGroupAnnotation, "migrations"))
	}).WithTimeout(10 * time.Second).Should(Succeed())
	g.Expect(running.Spec.Template.Labels).NotTo(HaveKey(keys.GroupLabel))
	g.Expect(w.all()).To(ContainElement(ContainSubstring(`spec.template.metadata.labels: not stamped with group "migrations"`)))

	// A suspended Job that never started may change its template: it is stamped.
	p = client.MergeFrom(suspended.DeepCopy())
	suspended.Labels[keys.GroupLabel] = "migrations"
	g.Expect(c.Patch(ctx, suspended, p)).To(Succeed())
	g.Expect(suspended.Spec.Template.Labels).To(HaveKeyWithValue(keys.GroupLabel, "migrations"))
}

// TestPodsBoundAtCreationAreNotGated: the API server refuses a pod created with spec.nodeName and
// scheduling gates, so a member pod bound to a node is created ungated, with a warning.
func TestPodsBoundAtCreationAreNotGated(t *testing.T) {
	g := NewWithT(t)
	c, w := clientWithWarnings(t)
	ns := namespace(t, true)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: ns, Labels: labels(keys.GroupLabel, "web", keys.GroupOrderLabel, "2")},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
	g.Expect(c.Create(context.Background(), pod)).To(Succeed())
	g.Expect(pod.Spec.SchedulingGates).To(BeEmpty())
	g.Expect(w.all()).To(ContainElement(ContainSubstring(`spec.nodeName: the pod is bound to node "n1"`)))
}
