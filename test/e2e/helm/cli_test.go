//go:build e2e

package helm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestHelmCLIInstallUpgradeUninstall runs the Helm CLI (v4, built from this module into the cache by
// `make cluster-assets`) as users do: `helm install --wait` finishes although the chart's pods are
// gated at first (the operator group is released, then the Widgets report Ready), `helm upgrade
// --wait` rolls the operator to a new template, and `helm uninstall --wait` deletes everything at
// once without stranding a Widget.
func TestHelmCLIInstallUpgradeUninstall(t *testing.T) {
	ctx := context.Background()
	kubeconfig := os.Getenv("KUBECONFIG")
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("KUBECONFIG must name the local cluster (make test-e2e): %v", err)
	}
	cs := kubernetes.NewForConfigOrDie(restCfg)
	dyn := dynamic.NewForConfigOrDie(restCfg)
	startOperatorAndCRD(t, filepath.Join("..", "..", ".."), kubeconfig)
	const ns = "helm-cli"
	waitFor(t, "an earlier run's namespace to be gone", func() bool {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"wavegate.io/enabled": "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })

	home := t.TempDir()
	helm := func(args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(os.Getenv("KUBE_BIN"), "helm"), append(args, "--namespace", ns, "--kubeconfig", kubeconfig)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %v: %v\n%s", args, err, out)
		}
	}
	ready := func() bool { return sequenceReady(ctx, dyn, ns) }

	helm("install", "cli", "chart", "--wait", "--timeout", "3m")
	// --wait returns once kstatus calls every object Current: the operator, whose pods were gated
	// at first, is Available. (kstatus calls a custom resource without conditions Current, so the
	// Widgets may not be Ready yet: wavegate's Sequence is what says the order completed.)
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, "widget-operator", metav1.GetOptions{})
	if err != nil || !available(d) {
		t.Fatalf("helm install --wait returned before the operator was available: %v", err)
	}
	waitFor(t, "the sequence to be released", ready)
	helm("upgrade", "cli", "chart", "--wait", "--timeout", "3m", "--set", "operatorTag=2")
	d, err = cs.AppsV1().Deployments(ns).Get(ctx, "widget-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "example.com/widget-operator:2" {
		t.Fatalf("the upgrade did not roll the operator: image %s", img)
	}
	if !available(d) {
		t.Fatal("helm upgrade --wait returned before the new operator was available")
	}
	waitFor(t, "the sequence to be released again", ready)

	helm("uninstall", "cli", "--wait", "--timeout", "3m")
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	waitFor(t, "every Widget to be gone", func() bool {
		list, err := dyn.Resource(widgets).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	})
	waitFor(t, "the operator to be gone", func() bool {
		_, err := cs.AppsV1().Deployments(ns).Get(ctx, "widget-operator", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func available(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
			return d.Status.UpdatedReplicas == *d.Spec.Replicas && d.Status.ObservedGeneration == d.Generation
		}
	}
	return false
}
