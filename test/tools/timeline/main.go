// Command timeline prints a readable live timeline of wavegate's work in some namespaces: pods
// gated and released, wait Jobs started and finished, groups released, and objects deleted.
// It exits when the namespaces' sequences are all released (--until released) or when every
// watched object is gone (--until gone).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"wavegate.io/wavegate/pkg/keys"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig")
	namespaces := flag.String("namespaces", "", "comma-separated namespaces")
	until := flag.String("until", "released", "released | gone")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()
	kinds := []schema.GroupVersionResource{
		{Version: "v1", Resource: "pods"}, {Group: "batch", Version: "v1", Resource: "jobs"},
		{Group: "apps", Version: "v1", Resource: "deployments"}, {Group: "apps", Version: "v1", Resource: "statefulsets"},
		{Group: "example.com", Version: "v1", Resource: "widgets"}, {Version: "v1", Resource: "services"},
	}
	live := map[string]bool{}
	seen := map[string]string{}
	type ev struct {
		t   watch.EventType
		obj *unstructured.Unstructured
		gvr schema.GroupVersionResource
	}
	ch := make(chan ev, 256)
	for _, ns := range strings.Split(*namespaces, ",") {
		for _, gvr := range kinds {
			w, err := dyn.Resource(gvr).Namespace(ns).Watch(ctx, metav1.ListOptions{})
			if err != nil {
				continue // the kind may not exist (no Widget CRD)
			}
			go func() {
				for e := range w.ResultChan() {
					if u, ok := e.Object.(*unstructured.Unstructured); ok {
						ch <- ev{e.Type, u, gvr}
					}
				}
			}()
		}
	}
	seqs := schema.GroupVersionResource{Group: "wavegate.io", Version: "v1alpha1", Resource: "sequences"}
	if w, err := dyn.Resource(seqs).Watch(ctx, metav1.ListOptions{}); err == nil {
		go func() {
			for e := range w.ResultChan() {
				if u, ok := e.Object.(*unstructured.Unstructured); ok {
					ch <- ev{e.Type, u, seqs}
				}
			}
		}()
	}
	released := map[string]bool{}
	print := func(format string, args ...any) {
		fmt.Printf("%+7.2fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	for {
		select {
		case <-ctx.Done():
			fmt.Println("timeline: timed out")
			os.Exit(1)
		case e := <-ch:
			u := e.obj
			key := e.gvr.Resource + "/" + u.GetNamespace() + "/" + u.GetName()
			group := u.GetLabels()[keys.GroupLabel]
			switch e.gvr.Resource {
			case "sequences":
				summary, _, _ := unstructured.NestedString(u.Object, "status", "summary")
				seq, _, _ := unstructured.NestedString(u.Object, "spec", "sequence")
				if !inList(seq, *namespaces) || summary == "" || seen[key] == summary {
					continue
				}
				seen[key] = summary
				print("sequence %-8s %s", seq, summary)
				conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
				for _, c := range conds {
					if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
						released[seq] = true
					}
				}
			case "pods":
				var p corev1.Pod
				_ = runtimeConvert(u, &p)
				state := string(p.Status.Phase)
				for _, g := range p.Spec.SchedulingGates {
					if g.Name == keys.SchedulingGate {
						state = "gated"
					}
				}
				if e.t == watch.Deleted {
					state = "deleted"
				}
				if seen[key] == state {
					continue
				}
				seen[key] = state
				who := "group " + group
				if wg := u.GetLabels()[keys.WaitGroupLabel]; wg != "" {
					who = "wait Job pod for group " + wg
				}
				print("pod      %-44s %-9s (%s)", p.Namespace+"/"+p.Name, state, who)
			default:
				if e.t == watch.Deleted {
					delete(live, key)
					print("deleted  %-44s (group %s)", strings.TrimSuffix(e.gvr.Resource, "s")+" "+u.GetNamespace()+"/"+u.GetName(), group)
				} else {
					live[key] = true
					if u.GetDeletionTimestamp() != nil && seen[key] != "deleting" {
						seen[key] = "deleting"
						print("deleting %-44s (group %s, finalizers %v)", strings.TrimSuffix(e.gvr.Resource, "s")+" "+u.GetNamespace()+"/"+u.GetName(), group, u.GetFinalizers())
					}
				}
			}
			if *until == "released" && allTrue(released, *namespaces) {
				print("every group is released")
				return
			}
			if *until == "gone" && len(live) == 0 && time.Since(start) > time.Second {
				print("everything is gone: nothing stuck")
				return
			}
		}
	}
}

func inList(s, list string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == s {
			return true
		}
	}
	return false
}

func allTrue(m map[string]bool, list string) bool {
	for _, x := range strings.Split(list, ",") {
		if !m[x] {
			return false
		}
	}
	return true
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
