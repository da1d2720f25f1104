//go:build e2e

// Package helm is the NVIDIA/aicr#610 round trip with the Helm SDK (helm.sh/helm/v4): install a
// chart with an operator group and a custom-resource group on wavegate's local cluster, uninstall
// it (Helm deletes everything at once), and require that no custom resource is left stuck on its
// finalizer. It is a separate module so that Helm's dependencies stay out of wavegate's.
package helm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/cli"
	"helm.sh/helm/v4/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const ns = "helm-widgets"

func TestHelmInstallUninstallRoundTrip(t *testing.T) {
	ctx := context.Background()
	kubeconfig := os.Getenv("KUBECONFIG")
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("KUBECONFIG must name the local cluster (make test-e2e): %v", err)
	}
	cs := kubernetes.NewForConfigOrDie(restCfg)
	dyn := dynamic.NewForConfigOrDie(restCfg)
	root := filepath.Join("..", "..", "..")

	startOperatorAndCRD(t, root, kubeconfig)
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"wavegate.io/enabled": "true"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })

	settings := cli.New()
	settings.SetNamespace(ns) // the namespace of the chart's objects, not only of the release
	cfg := action.NewConfiguration()
	if err := cfg.Init(settings.RESTClientGetter(), ns, "secret"); err != nil {
		t.Fatal(err)
	}
	chart, err := loader.Load("chart")
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.WaitStrategy = "widgets", ns, kube.HookOnlyStrategy
	if _, err := install.RunWithContext(ctx, chart, nil); err != nil {
		t.Fatalf("helm install: %v", err)
	}

	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	// The instances group is released once the operator is ready and the Widgets report Ready.
	waitFor(t, "the sequence to be released", func() bool { return sequenceReady(ctx, dyn, ns) })

	uninstall := action.NewUninstall(cfg)
	uninstall.WaitStrategy, uninstall.DeletionPropagation = kube.HookOnlyStrategy, "background"
	if _, err := uninstall.Run("widgets"); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	waitFor(t, "every Widget to be gone", func() bool {
		list, err := dyn.Resource(widgets).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	})
	waitFor(t, "the operator to be gone", func() bool {
		_, err := cs.AppsV1().Deployments(ns).Get(ctx, "widget-operator", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// startOperatorAndCRD runs the strict stand-in operator for the test and installs the Widget CRD
// (TestMain deletes it at the end).
func startOperatorAndCRD(t *testing.T, root, kubeconfig string) {
	t.Helper()
	op := exec.Command(filepath.Join(root, "bin", "widget-operator"), "--kubeconfig", kubeconfig)
	if err := op.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Process.Kill(); _, _ = op.Process.Wait() })
	kubectl := filepath.Join(os.Getenv("KUBE_BIN"), "kubectl")
	// A CRD (or namespace) left terminating by an earlier run must be gone first.
	if out, _ := exec.Command(kubectl, "get", "crd/widgets.example.com", "--ignore-not-found", "-o", "jsonpath={.metadata.deletionTimestamp}").Output(); len(out) > 0 {
		_ = exec.Command(kubectl, "wait", "--for=delete", "crd/widgets.example.com", "--timeout=90s").Run()
	}
	// The CRD joins sequence widgets, which examples/widgets/policy.yaml declares for cluster-scoped
	// members; retry until the webhook has loaded the policy.
	if out, err := exec.Command(kubectl, "apply", "-f", filepath.Join(root, "examples", "widgets", "policy.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for i := 0; ; i++ {
		out, err := exec.Command(kubectl, "apply", "-f", filepath.Join(root, "examples", "widgets", "crd.yaml")).CombinedOutput()
		if err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("%v: %s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out, err := exec.Command(kubectl, "wait", "--for", "condition=Established", "crd/widgets.example.com", "--timeout=60s").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	root := filepath.Join("..", "..", "..")
	_ = exec.Command(filepath.Join(os.Getenv("KUBE_BIN"), "kubectl"), "delete", "-f", filepath.Join(root, "examples", "widgets", "crd.yaml"), "--wait=false").Run()
	os.Exit(code)
}

// sequenceReady reports whether the Sequence of a namespace has Ready=True: every group released.
func sequenceReady(ctx context.Context, dyn dynamic.Interface, seq string) bool {
	s, err := dyn.Resource(schema.GroupVersionResource{Group: "wavegate.io", Version: "v1alpha1", Resource: "sequences"}).Get(ctx, seq, metav1.GetOptions{})
	if err != nil {
		return false
	}
	conds, _, _ := unstructuredSlice(s.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func unstructuredSlice(obj map[string]any, path ...string) ([]any, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	s, ok := cur.([]any)
	return s, ok, nil
}
