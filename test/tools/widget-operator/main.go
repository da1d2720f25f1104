// Command widget-operator is a stand-in operator for wavegate's local cluster, as strict as a real
// one: it works (reports Widgets Ready, removes the example.com/cleanup finalizer from deleted
// Widgets, after the seconds a Widget's example.com/cleanup-seconds says its cleanup takes) only while one of its pods (label app=widget-operator, in the namespace the Widget names
// in example.com/operator-namespace, else the Widget's own) is Running and not being deleted. A
// real operator's process stops when its pod is deleted; so does this one's work. When the
// operator's pods go first, Widgets stay stuck: the teardown race that wavegate's ordering prevents.
//
// It also needs what a real operator's process needs from its namespace, and the API server
// enforces it as it would for a real one:
//   - its credentials: every write is made with a token of the ServiceAccount widget-operator,
//     bound to the running pod and requested when the pod is first seen running, as a kubelet
//     mounts one. The API server accepts it only while the ServiceAccount and the pod exist (and
//     for a minute after their deletion began), and authorizes it by the namespace's RBAC (a Role
//     and RoleBinding, or a ClusterRole binding);
//   - leadership: it renews a Lease widget-operator in its namespace every 2 s, as
//     controller-runtime's leader election does, and works only while the last renewal is less
//     than 10 s old. A deleted Lease cannot be created again in a terminating namespace, so an
//     operator whose Lease goes first stops for good, as a real one that loses its election does.
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

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	finalizer = "example.com/cleanup"
	// cleanupAnnotation on a Widget is how many seconds its cleanup takes once it is deleted.
	cleanupAnnotation = "example.com/cleanup-seconds"
	serviceAccount    = "widget-operator"
	leaseName         = "widget-operator"
	// renewEvery and renewDeadline are controller-runtime's leader election defaults, scaled down
	// (its retry period 2 s, its renew deadline 10 s).
	renewEvery    = 2 * time.Second
	renewDeadline = 10 * time.Second
)

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// session is the operator's process in one namespace: the pod it runs as, its clients with that
// pod's token, and its leadership.
type session struct {
	pod     types.UID
	dyn     dynamic.Interface
	cs      kubernetes.Interface
	renewed time.Time // the last successful renewal of the Lease
	tried   time.Time
}

type operator struct {
	cfg      *rest.Config
	admin    kubernetes.Interface
	sessions map[string]*session
}

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
	// The admin client sees what a kubelet and the operator's informers would: its pods, and the
	// Widgets. Every write the operator makes goes through the session's credentials.
	dyn := dynamic.NewForConfigOrDie(cfg)
	op := &operator{cfg: cfg, admin: kubernetes.NewForConfigOrDie(cfg), sessions: map[string]*session{}}
	for ctx.Err() == nil {
		list, err := dyn.Resource(widgets).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, w := range list.Items {
				if w.GetDeletionTimestamp() != nil && !slices.Contains(w.GetFinalizers(), finalizer) {
					continue
				}
				s := op.session(ctx, operatorNamespace(w))
				if s == nil {
					continue // not running, or no longer allowed to: nobody reconciles this Widget
				}
				if w.GetDeletionTimestamp() == nil {
					// Reconcile: report readiness, as a real operator would (wavegate does not call a
					// custom resource without conditions ready).
					if conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions"); len(conds) == 0 {
						_ = unstructured.SetNestedSlice(w.Object, []any{map[string]any{"type": "Ready", "status": "True", "reason": "Reconciled"}}, "status", "conditions")
						_, _ = s.dyn.Resource(widgets).Namespace(w.GetNamespace()).Update(ctx, &w, metav1.UpdateOptions{})
					}
					continue
				}
				// Cleanup takes as long as the Widget says (deprovisioning what it stands for): the
				// operator must still run, hold its Lease and be authorized when it is done.
				if d, err := time.ParseDuration(w.GetAnnotations()[cleanupAnnotation] + "s"); err == nil && time.Since(w.GetDeletionTimestamp().Time) < d {
					continue
				}
				w.SetFinalizers(slices.DeleteFunc(w.GetFinalizers(), func(f string) bool { return f == finalizer }))
				if _, err := s.dyn.Resource(widgets).Namespace(w.GetNamespace()).Update(ctx, &w, metav1.UpdateOptions{}); err == nil {
					fmt.Printf("%s finalized widget %s/%s\n", time.Now().UTC().Format(time.RFC3339Nano), w.GetNamespace(), w.GetName())
				} else {
					fmt.Printf("%s could not finalize widget %s/%s: %v\n", time.Now().UTC().Format(time.RFC3339Nano), w.GetNamespace(), w.GetName(), err)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// session returns the operator's process in namespace ns when it runs and leads, else nil.
func (o *operator) session(ctx context.Context, ns string) *session {
	pod := runningPod(ctx, o.admin, ns)
	if pod == nil {
		delete(o.sessions, ns)
		return nil
	}
	s := o.sessions[ns]
	if s == nil || s.pod != pod.UID {
		// A new process: the kubelet mounted a token bound to its pod when it started.
		tr, err := o.admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: new(int64(3600)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			delete(o.sessions, ns)
			return nil
		}
		cfg := rest.AnonymousClientConfig(o.cfg)
		cfg.BearerToken = tr.Status.Token
		s = &session{pod: pod.UID, dyn: dynamic.NewForConfigOrDie(cfg), cs: kubernetes.NewForConfigOrDie(cfg)}
		o.sessions[ns] = s
	}
	if time.Since(s.tried) >= renewEvery {
		s.tried = time.Now()
		if err := renew(ctx, s.cs, ns); err == nil {
			s.renewed = time.Now()
		} else {
			fmt.Printf("%s could not renew lease %s/%s: %v\n", time.Now().UTC().Format(time.RFC3339Nano), ns, leaseName, err)
		}
	}
	if time.Since(s.renewed) >= renewDeadline {
		return nil // leadership lost
	}
	return s
}

// renew renews the operator's Lease, creating it when it does not exist.
func renew(ctx context.Context, cs kubernetes.Interface, ns string) error {
	now := metav1.NewMicroTime(time.Now())
	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cs.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: ns},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: new(serviceAccount), AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	_, err = cs.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// operatorNamespace is where the operator of a Widget runs.
func operatorNamespace(w unstructured.Unstructured) string {
	if ns := w.GetAnnotations()["example.com/operator-namespace"]; ns != "" {
		return ns
	}
	return w.GetNamespace()
}

// runningPod returns a pod of the operator that is Running and not being deleted, or nil.
func runningPod(ctx context.Context, cs kubernetes.Interface, ns string) *corev1.Pod {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=widget-operator"})
	if err != nil {
		return nil
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p
		}
	}
	return nil
}
