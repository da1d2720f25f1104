// Command widget-operator is a stand-in operator for wavegate's local cluster, as strict as a real
// one: it works (reports Widgets Ready, removes the example.com/cleanup finalizer from deleted
// Widgets) only while one of its pods (label app=widget-operator, in the namespace the Widget names
// in example.com/operator-namespace, else the Widget's own) is Running and not being deleted. A
// real operator's process stops when its pod is deleted; so does this one's work. When the
// operator's pods go first, Widgets stay stuck: the teardown race that wavegate's ordering prevents.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const finalizer = "example.com/cleanup"

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the local cluster")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	cs := kubernetes.NewForConfigOrDie(cfg)
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	for ctx.Err() == nil {
		list, err := dyn.Resource(widgets).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, w := range list.Items {
				if w.GetDeletionTimestamp() == nil {
					if !running(ctx, cs, operatorNamespace(w)) {
						continue
					}
					// Reconcile: report readiness, as a real operator would (wavegate does not call a
					// custom resource without conditions ready).
					if conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions"); len(conds) == 0 {
						_ = unstructured.SetNestedSlice(w.Object, []any{map[string]any{"type": "Ready", "status": "True", "reason": "Reconciled"}}, "status", "conditions")
						_, _ = dyn.Resource(widgets).Namespace(w.GetNamespace()).Update(ctx, &w, metav1.UpdateOptions{})
					}
					continue
				}
				if !slices.Contains(w.GetFinalizers(), finalizer) {
					continue
				}
				if !running(ctx, cs, operatorNamespace(w)) {
					continue
				}
				w.SetFinalizers(slices.DeleteFunc(w.GetFinalizers(), func(f string) bool { return f == finalizer }))
				if _, err := dyn.Resource(widgets).Namespace(w.GetNamespace()).Update(ctx, &w, metav1.UpdateOptions{}); err == nil {
					fmt.Printf("%s finalized widget %s/%s\n", time.Now().UTC().Format(time.RFC3339Nano), w.GetNamespace(), w.GetName())
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// operatorNamespace is where the operator of a Widget runs.
func operatorNamespace(w unstructured.Unstructured) string {
	if ns := w.GetAnnotations()["example.com/operator-namespace"]; ns != "" {
		return ns
	}
	return w.GetNamespace()
}

// running reports whether a pod of the operator is Running and not being deleted.
func running(ctx context.Context, cs kubernetes.Interface, ns string) bool {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=widget-operator"})
	if err != nil {
		return false
	}
	return slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
	})
}
