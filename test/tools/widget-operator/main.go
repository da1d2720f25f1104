// Command widget-operator is a stand-in operator for wavegate's local cluster: it removes the
// example.com/cleanup finalizer from deleted Widgets, but only while a pod of its Deployment
// (label app=widget-operator in the Widget's namespace) exists. When the operator's pods are gone
// first, Widgets stay stuck: the teardown race that wavegate's ordering prevents.
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
				pods, err := cs.CoreV1().Pods(w.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: "app=widget-operator"})
				if err != nil || len(pods.Items) == 0 {
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
