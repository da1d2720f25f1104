package teardown

import (
	"bytes"
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/teardown"
)

// TestUninstallingWavegateFirstStrandsNothing runs last in this package: it removes wavegate.
// With members holding the finalizer and a pod still gated, wavegate is stopped and uninstalled
// (`wavegate uninstall`); then deleting everything leaves nothing behind wavegate's finalizer, and
// no pod waits on a gate that nobody will remove.
var sprockets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "sprockets"}

func TestUninstallingWavegateFirstStrandsNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, true)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, Labels: map[string]string{keys.GroupLabel: "db", keys.GroupOrderLabel: "1"}}}
	g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
	g.Expect(cm.Finalizers).To(ContainElement(keys.TeardownFinalizer))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{keys.GroupLabel: "web", keys.GroupOrderLabel: "2"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "u", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "web"}}}}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	g.Expect(pod.Spec.SchedulingGates).NotTo(BeEmpty())
	// A custom resource whose CRD is deleted while it holds the finalizer: the CRD stays
	// terminating, and discovery no longer advertises patch for its resource (the API server still
	// serves it, for finalizers to be removed).
	g.Expect(installCRD(sprockets, "Sprocket", apiextensionsv1.NamespaceScoped)).To(Succeed())
	sprocket := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Sprocket",
		"metadata": map[string]any{"name": "s", "namespace": ns, "finalizers": []any{keys.TeardownFinalizer},
			"labels": map[string]any{keys.GroupLabel: "db", keys.GroupOrderLabel: "1"}}}}
	_, err := dyn.Resource(sprockets).Namespace(ns).Create(ctx, sprocket, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	mgr.Stop()
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "sprockets.example.com"}}
	g.Expect(env.Client.Delete(ctx, crd)).To(Succeed())
	disc := discovery.NewDiscoveryClientForConfigOrDie(env.Config)
	g.Eventually(func(g Gomega) []string {
		l, err := disc.ServerResourcesForGroupVersion("example.com/v1")
		g.Expect(err).NotTo(HaveOccurred())
		for _, r := range l.APIResources {
			if r.Name == "sprockets" {
				return r.Verbs
			}
		}
		return nil
	}).WithTimeout(timeout).ShouldNot(Or(BeEmpty(), ContainElement("patch")))
	out := &bytes.Buffer{}
	u := &teardown.Uninstall{
		Kube: kubernetes.NewForConfigOrDie(env.Config), Metadata: metadata.NewForConfigOrDie(env.Config),
		Discovery:             discovery.NewDiscoveryClientForConfigOrDie(env.Config),
		WebhookConfigurations: []string{"mutating-webhook-configuration", "validating-webhook-configuration"},
		GroupLabels:           []string{keys.GroupLabel}, Out: out,
	}
	g.Expect(u.Run(ctx)).To(Succeed())
	g.Expect(out.String()).To(MatchRegexp(`removed \d+ teardown finalizers and 1 scheduling gates`))
	g.Eventually(func() error { return env.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd) }).WithTimeout(timeout).
		Should(Satisfy(apierrors.IsNotFound), "the terminating CRD is stuck on its custom resource's finalizer")

	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
	g.Expect(pod.Spec.SchedulingGates).To(BeEmpty())
	g.Expect(env.Client.Delete(ctx, cm)).To(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm)).NotTo(Succeed(), "the ConfigMap is stuck on a finalizer")
	// And new objects are not touched any more.
	again := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "again", Namespace: ns, Labels: cm.Labels}}
	g.Expect(env.Client.Create(ctx, again)).To(Succeed())
	g.Expect(again.Finalizers).To(BeEmpty())
	g.Expect(u.Run(ctx)).To(Succeed(), "uninstall is idempotent")
}
