// Package teardown tests ordered teardown through a real API server with a stand-in operator whose
// custom resources carry a finalizer that only a running operator removes.
package teardown

import (
	"context"
	"fmt"
	"maps"
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
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
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
	// node is where the operator's pods run.
	node = "node-0"
)

var (
	widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	gadgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}
)

func TestMain(m *testing.M) {
	os.Exit(framework.RunSuite(m, &env, &mgr, func() error {
		dyn = dynamic.NewForConfigOrDie(env.Config)
		if err := env.Client.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
			return err
		}
		return installWidgetCRD() // before the manager, so that it discovers Widgets at start
	}, func() (func(), error) {
		ctx, cancel := context.WithCancel(context.Background())
		go runOperator(ctx)
		go runGC(ctx)
		go runKubelet(ctx)
		return cancel, nil
	}))
}

// installWidgetCRD installs the namespaced Widgets and the cluster-scoped Gadgets.
func installWidgetCRD() error {
	for _, k := range []struct {
		gvr   schema.GroupVersionResource
		kind  string
		scope apiextensionsv1.ResourceScope
	}{{widgets, "Widget", apiextensionsv1.NamespaceScoped}, {gadgets, "Gadget", apiextensionsv1.ClusterScoped}} {
		if err := installCRD(k.gvr, k.kind, k.scope); err != nil {
			return err
		}
	}
	return nil
}

// installCRD installs a schemaless CRD and waits until its resource is served.
func installCRD(gvr schema.GroupVersionResource, kind string, scope apiextensionsv1.ResourceScope) error {
	crd := framework.SchemalessCRD(gvr, kind, scope)
	if err := env.Client.Create(context.Background(), crd); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := dyn.Resource(gvr).List(context.Background(), metav1.ListOptions{}); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the %s CRD was not served in time", kind)
}

// runOperator is the stand-in operator, as strict as a real one: it works only while one of its pods
// (label app=operator, in the namespace the Widget names in example.com/operator-namespace, else
// the Widget's own) is Running and not being deleted; a pod that is terminating is a process that
// received SIGTERM. Then it removes a deleted Widget's finalizer. Without a working operator a
// deleted Widget stays forever: the race wavegate prevents.
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
				if d, err := time.ParseDuration(w.GetAnnotations()[cleanupSecondsAnnotation] + "s"); err == nil && time.Since(w.GetDeletionTimestamp().Time) < d {
					continue // a longer cleanup (deprovisioning what the Widget stands for)
				}
				opNS := w.GetNamespace()
				if v := w.GetAnnotations()[operatorNamespaceAnnotation]; v != "" {
					opNS = v
				}
				if !operatorRunning(ctx, cs, opNS) {
					continue // the operator is gone or stopping: nobody finalizes this Widget
				}
				fs := slices.DeleteFunc(slices.Clone(w.GetFinalizers()), func(f string) bool { return f == widgetFinalizer })
				w.SetFinalizers(fs)
				_, _ = dyn.Resource(widgets).Namespace(w.GetNamespace()).Update(ctx, &w, metav1.UpdateOptions{})
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const (
	operatorNamespaceAnnotation = "example.com/operator-namespace"
	// cleanupSecondsAnnotation is how many seconds, at least, a Widget's cleanup takes (the
	// deletionTimestamp has whole seconds, so the 500 ms above may be none).
	cleanupSecondsAnnotation = "example.com/cleanup-seconds"
)

// operatorRunning reports whether a pod of the operator runs: phase Running, no deletionTimestamp.
func operatorRunning(ctx context.Context, cs kubernetes.Interface, ns string) bool {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=operator"})
	if err != nil {
		return false
	}
	return slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
	})
}

// runKubelet plays the kubelet of node: a pod that is being deleted stops at once (the operator
// above already treats it as dead) and is removed from the API server a moment later.
func runKubelet(ctx context.Context) {
	cs := kubernetes.NewForConfigOrDie(env.Config)
	for ctx.Err() == nil {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err == nil {
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil {
					continue
				}
				// deletionTimestamp is when the grace period ends; the deletion was asked for before.
				asked := p.DeletionTimestamp.Add(-time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 0)) * time.Second)
				if time.Since(asked) > 100*time.Millisecond {
					_ = cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runGC is the stand-in garbage collector for the operator's ReplicaSets and pods (envtest runs no
// kube-controller-manager). Background: a dependent is deleted once its owner is gone. Foreground:
// an owner with the foregroundDeletion finalizer has its dependents deleted first and goes once
// none is left.
func runGC(ctx context.Context) {
	cs := kubernetes.NewForConfigOrDie(env.Config)
	for ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		owner := func(ns string, refs []metav1.OwnerReference, get func(ns, name string) (metav1.Object, error)) (gone, foreground bool) {
			c := metav1.GetControllerOfNoCopy(&metav1.ObjectMeta{OwnerReferences: refs})
			if c == nil {
				return false, false
			}
			o, err := get(ns, c.Name)
			if apierrors.IsNotFound(err) || err == nil && o.GetUID() != c.UID {
				return true, false
			}
			return false, err == nil && o.GetDeletionTimestamp() != nil && slices.Contains(o.GetFinalizers(), metav1.FinalizerDeleteDependents)
		}
		getDeployment := func(ns, name string) (metav1.Object, error) {
			return cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		}
		getRS := func(ns, name string) (metav1.Object, error) {
			return cs.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		}
		rss, err := cs.AppsV1().ReplicaSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "app=operator"})
		if err != nil {
			continue // the API server is going away at the end of the suite
		}
		for _, rs := range rss.Items {
			if gone, fg := owner(rs.Namespace, rs.OwnerReferences, getDeployment); rs.DeletionTimestamp == nil && (gone || fg) {
				_ = cs.AppsV1().ReplicaSets(rs.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{})
			}
		}
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "app=operator"})
		if err != nil {
			continue
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			gone, _ := owner(p.Namespace, p.OwnerReferences, getRS)
			rs, err := cs.AppsV1().ReplicaSets(p.Namespace).Get(ctx, p.OwnerReferences[0].Name, metav1.GetOptions{})
			if gone || err == nil && rs.DeletionTimestamp != nil {
				_ = cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
			}
		}
		// A Widget a Widget owns (an operator's child resource) is deleted once its owner is gone.
		// Foreground deletion of a Widget has nothing to wait for: the tests delete no Widget that
		// owns another in the foreground.
		ws, err := dyn.Resource(widgets).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		getWidget := func(ns, name string) (metav1.Object, error) {
			return dyn.Resource(widgets).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		}
		for _, w := range ws.Items {
			if gone, _ := owner(w.GetNamespace(), w.GetOwnerReferences(), getWidget); gone && w.GetDeletionTimestamp() == nil {
				_ = dyn.Resource(widgets).Namespace(w.GetNamespace()).Delete(ctx, w.GetName(), metav1.DeleteOptions{})
			}
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
			left := 0
			for _, rs := range rss.Items {
				if rs.Namespace == d.Namespace && metav1.IsControlledBy(&rs, &d) {
					left++
				}
			}
			if left == 0 {
				d.Finalizers = slices.DeleteFunc(d.Finalizers, func(f string) bool { return f == metav1.FinalizerDeleteDependents })
				_, _ = cs.AppsV1().Deployments(d.Namespace).Update(ctx, &d, metav1.UpdateOptions{})
			}
		}
	}
}

// deleteNamespace deletes a namespace the way kube-controller-manager's namespace controller does
// (pkg/controller/namespace/deletion): after a grace period (5 s there, 1 s here), as the
// namespace-controller service account, DeleteCollection with background propagation on *every*
// namespaced resource, Pods and ReplicaSets included; on errors it retries with exponential
// back-off; once nothing is left it finalizes the namespace.
// deleteNamespace deletes a namespace as the namespace controller does, and returns the refusals it
// met, one per kind.
func deleteNamespace(t *testing.T, ns string) map[string]string {
	t.Helper()
	ctx := context.Background()
	g := NewWithT(t)
	g.Expect(env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:namespace-controller",
		Groups: []string{"system:masters", "system:authenticated"}}
	cfg.WarningHandler = rest.NoWarnings{}
	md := metadata.NewForConfigOrDie(cfg)
	kinds, _, err := members.DiscoverAll(discovery.NewDiscoveryClientForConfigOrDie(cfg), "deletecollection", "list")
	g.Expect(err).NotTo(HaveOccurred())
	time.Sleep(time.Second) // the namespace controller's grace period (5 s in kube-controller-manager)
	backoff := 5 * time.Millisecond
	deadline := time.Now().Add(timeout)
	var remaining []string
	refused := map[string]string{}
	for time.Now().Before(deadline) {
		failed, left := false, 0
		remaining = remaining[:0]
		for _, k := range kinds {
			if !k.Namespaced {
				continue
			}
			err = md.Resource(k.GVR).Namespace(ns).DeleteCollection(ctx,
				metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}, metav1.ListOptions{})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsMethodNotSupported(err) {
				failed = true
				refused[k.GVK.Kind] = err.Error()
			}
			if list, err := md.Resource(k.GVR).Namespace(ns).List(ctx, metav1.ListOptions{}); err == nil {
				left += len(list.Items)
				for _, it := range list.Items {
					remaining = append(remaining, fmt.Sprintf("%s %s %v deleting=%v err=%v", k.GVK.Kind, it.Name, it.Finalizers, it.DeletionTimestamp, err))
				}
			}
		}
		if left == 0 {
			n := &corev1.Namespace{}
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: ns}, n)).To(Succeed())
			n.Spec.Finalizers = nil
			_, err := kubernetes.NewForConfigOrDie(env.Config).CoreV1().Namespaces().Finalize(ctx, n, metav1.UpdateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			return refused
		}
		if failed {
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		time.Sleep(200 * time.Millisecond) // content remains (finalizers): look again
	}
	t.Fatalf("namespace %s still has content after %s: %v", ns, timeout, remaining)
	return nil
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

// install creates an operator (group operator) as a Deployment whose ReplicaSet's pod runs on the
// node, and n Widgets (group instances) carrying the operator's finalizer.
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
	// What the deployment controller would make: a ReplicaSet with the (mutated) template's labels.
	labels := maps.Clone(a.operator.Spec.Template.Labels)
	labels["pod-template-hash"] = "1"
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "operator-1", Namespace: ns, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(a.operator, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: a.operator.Spec.Template.Spec}}}
	g.Expect(env.Client.Create(ctx, rs)).To(Succeed())
	a.pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "operator-1-pod", Namespace: ns, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
		Spec: a.operator.Spec.Template.Spec}
	g.Expect(env.Client.Create(ctx, a.pod)).To(Succeed())
	// The scheduler binds it once wavegate ungates it (its group is the first), the kubelet runs it.
	cs := kubernetes.NewForConfigOrDie(env.Config)
	g.Eventually(func() error {
		return cs.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: a.pod.Name},
			Target: corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{})
	}).WithTimeout(timeout).Should(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(a.pod), a.pod)).To(Succeed())
	a.pod.Status.Phase = corev1.PodRunning
	a.pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	g.Expect(env.Client.Status().Update(ctx, a.pod)).To(Succeed())
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
