// Package teardown tests ordered teardown through a real API server with a stand-in operator whose
// custom resources carry a finalizer that only a running operator removes.
package teardown

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/test/framework"
)

var (
	env *framework.Env
	mgr *framework.Manager
	dyn dynamic.Interface
)

const (
	timeout         = 20 * time.Second
	widgetFinalizer = "example.com/cleanup"
)

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

func TestMain(m *testing.M) {
	os.Exit(framework.RunSuite(m, &env, &mgr, func() error {
		dyn = dynamic.NewForConfigOrDie(env.Config)
		return installWidgetCRD() // before the manager, so that it discovers Widgets at start
	}, func() (func(), error) {
		ctx, cancel := context.WithCancel(context.Background())
		go runOperator(ctx)
		go runGC(ctx)
		return cancel, nil
	}))
}

func installWidgetCRD() error {
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	if err := env.Client.Create(context.Background(), crd); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := dyn.Resource(widgets).List(context.Background(), metav1.ListOptions{}); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the Widget CRD was not served in time")
}

// runOperator is the stand-in operator: it removes a Widget's finalizer when the Widget is being
// deleted, but only while one of its pods (label app=operator in the Widget's namespace) runs.
// Without a running operator, a deleted Widget stays forever: the race wavegate prevents.
func runOperator(ctx context.Context) {
	cs := kubernetes.NewForConfigOrDie(env.Config)
	for ctx.Err() == nil {
		list, err := dyn.Resource(widgets).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, w := range list.Items {
				if w.GetDeletionTimestamp() == nil || !slices.Contains(w.GetFinalizers(), widgetFinalizer) ||
					time.Since(w.GetDeletionTimestamp().Time) < 500*time.Millisecond {
					continue // an operator takes a moment to clean up; wavegate's hold must be visible meanwhile
				}
				pods, err := cs.CoreV1().Pods(w.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: "app=operator"})
				if err != nil || len(pods.Items) == 0 {
					continue // the operator is gone: nobody finalizes this Widget
				}
				fs := slices.DeleteFunc(slices.Clone(w.GetFinalizers()), func(f string) bool { return f == widgetFinalizer })
				w.SetFinalizers(fs)
				_, _ = dyn.Resource(widgets).Namespace(w.GetNamespace()).Update(ctx, &w, metav1.UpdateOptions{})
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runGC is the stand-in garbage collector for the operator's pods (envtest runs no
// kube-controller-manager): background deletion deletes the pods once their Deployment is gone;
// foreground deletion deletes them first, then lets the Deployment go.
func runGC(ctx context.Context) {
	cs := kubernetes.NewForConfigOrDie(env.Config)
	for ctx.Err() == nil {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "app=operator"})
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for _, p := range pods.Items {
			d, err := cs.AppsV1().Deployments(p.Namespace).Get(ctx, "operator", metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_ = cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			case err == nil && d.DeletionTimestamp != nil && slices.Contains(d.Finalizers, metav1.FinalizerDeleteDependents):
				_ = cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
		}
		// Widgets have no dependents: foreground deletion has nothing to wait for.
		ws, err := dyn.Resource(widgets).List(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue // the API server is going away at the end of the suite
		}
		for _, w := range ws.Items {
			if w.GetDeletionTimestamp() != nil && slices.Contains(w.GetFinalizers(), metav1.FinalizerDeleteDependents) {
				w.SetFinalizers(slices.DeleteFunc(w.GetFinalizers(), func(f string) bool { return f == metav1.FinalizerDeleteDependents }))
				_, _ = dyn.Resource(widgets).Namespace(w.GetNamespace()).Update(ctx, &w, metav1.UpdateOptions{})
			}
		}
		deps, err := cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, d := range deps.Items {
			if d.DeletionTimestamp == nil || !slices.Contains(d.Finalizers, metav1.FinalizerDeleteDependents) {
				continue
			}
			left, _ := cs.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + d.Name})
			if len(left.Items) == 0 {
				d.Finalizers = slices.DeleteFunc(d.Finalizers, func(f string) bool { return f == metav1.FinalizerDeleteDependents })
				_, _ = cs.AppsV1().Deployments(d.Namespace).Update(ctx, &d, metav1.UpdateOptions{})
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type app struct {
	ns       string
	operator *appsv1.Deployment
	pod      *corev1.Pod
	widgets  []*unstructured.Unstructured
}

func namespace(t *testing.T, optedIn bool) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "td-"}}
	if optedIn {
		ns.Labels = map[string]string{keys.EnabledLabel: "true"}
	}
	NewWithT(t).Expect(env.Client.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

// install creates an operator (group operator) with a running pod and n Widgets (group instances)
// carrying the operator's finalizer.
func install(t *testing.T, ns string, n int, operatorAnnotations map[string]string) *app {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	a := &app{ns: ns}
	sel := map[string]string{"app": "operator"}
	a.operator = &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "operator", Namespace: ns, Annotations: operatorAnnotations,
			Labels: map[string]string{keys.GroupLabel: "operator", keys.GroupOrderLabel: "1"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "op", Image: "operator"}}}}},
	}
	g.Expect(env.Client.Create(ctx, a.operator)).To(Succeed())
	a.pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "operator-pod", Namespace: ns, Labels: a.operator.Spec.Template.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "operator", UID: a.operator.UID}}},
		Spec: a.operator.Spec.Template.Spec}
	g.Expect(env.Client.Create(ctx, a.pod)).To(Succeed())
	for i := range n {
		w := widget(ns, fmt.Sprintf("w%d", i), map[string]any{keys.GroupLabel: "instances", keys.GroupOrderLabel: "2"})
		created, err := dyn.Resource(widgets).Namespace(ns).Create(ctx, w, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		a.widgets = append(a.widgets, created)
	}
	return a
}

func widget(ns, name string, labels map[string]any) *unstructured.Unstructured {
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns, "finalizers": []any{widgetFinalizer}},
	}}
	if labels != nil {
		w.Object["metadata"].(map[string]any)["labels"] = labels
	}
	return w
}

// deleteAll deletes everything at once, in file order, as `kubectl delete -f dir/` does.
func (a *app) deleteAll(t *testing.T, policy metav1.DeletionPropagation) {
	t.Helper()
	ctx := context.Background()
	NewWithT(t).Expect(env.Client.Delete(ctx, a.operator, client.PropagationPolicy(policy))).To(Succeed())
	for _, w := range a.widgets {
		NewWithT(t).Expect(dyn.Resource(widgets).Namespace(a.ns).Delete(ctx, w.GetName(), metav1.DeleteOptions{PropagationPolicy: &policy})).To(Succeed())
	}
}

func (a *app) operatorPods(g Gomega) int {
	var pods corev1.PodList
	g.Expect(env.Client.List(context.Background(), &pods, client.InNamespace(a.ns), client.MatchingLabels{"app": "operator"})).To(Succeed())
	return len(pods.Items)
}

func (a *app) widgetsLeft(g Gomega) int {
	list, err := dyn.Resource(widgets).Namespace(a.ns).List(context.Background(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	return len(list.Items)
}

func (a *app) operatorExists(g Gomega) bool {
	err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(a.operator), &appsv1.Deployment{})
	if apierrors.IsNotFound(err) {
		return false
	}
	g.Expect(err).NotTo(HaveOccurred())
	return true
}

// unstick removes the Widgets' finalizers so that a test that proved them stuck leaves no debris.
func (a *app) unstick(t *testing.T) {
	for _, w := range a.widgets {
		_, _ = dyn.Resource(widgets).Namespace(a.ns).Patch(context.Background(), w.GetName(), "application/merge-patch+json",
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	}
}
