package sequence

import (
	"context"
	"errors"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"wavegate.io/wavegate/pkg/keys"
)

// TestCreateJobInTerminatingNamespace: a namespace being deleted takes no new wait Job, and that
// is not an error to retry (its groups are being torn down); any other refusal is.
func TestCreateJobInTerminatingNamespace(t *testing.T) {
	refuse := errors.New("quota exceeded")
	for _, tc := range []struct {
		name    string
		refusal func(client.Object) error
		wantErr bool
	}{
		{"terminating", func(o client.Object) error {
			return namespaceTerminating(schema.GroupResource{Group: "batch", Resource: "jobs"}, o)
		}, false},
		{"other refusal", func(client.Object) error { return refuse }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), interceptor.Funcs{
				Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
					if _, ok := obj.(*batchv1.Job); ok {
						return tc.refusal(obj)
					}
					return nil
				},
			})
			r := &Reconciler{Client: c, Image: "wavegate:test", Namespace: "wavegate-system"}
			g := &Group{Name: "web", JobName: "wavegate-wait-web-0123456789", JobNamespace: "shop"}
			if _, err := r.createJob(context.Background(), "shop", g); (err != nil) != tc.wantErr {
				t.Errorf("createJob() = %v, want error: %v", err, tc.wantErr)
			}
		})
	}
}

// TestJobNamespace: a group's wait Job runs in its members' namespace when they share one, and in
// wavegate's own otherwise (cluster-scoped members, or a shared sequence's group across tenants):
// no tenant hosts the waiter that decides for another tenant's members.
func TestJobNamespace(t *testing.T) {
	m := func(ns string) Member { return Member{Namespace: ns} }
	for _, tc := range []struct {
		name    string
		members []Member
		want    string
	}{
		{"one namespace", []Member{m("shop"), m("shop")}, "shop"},
		{"cluster-scoped only", []Member{m("")}, "wavegate-system"},
		{"cluster-scoped and namespaced", []Member{m("shop"), m("")}, "wavegate-system"},
		{"two tenants", []Member{m("a"), m("b")}, "wavegate-system"},
	} {
		if got := jobNamespace(tc.members, "wavegate-system"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// listOnly is a cache that only lists, from a client.
type listOnly struct {
	cache.Cache
	r client.Reader
}

func (l listOnly) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return l.r.List(ctx, list, opts...)
}

// TestSucceededWaitersOnlyInTheJobsNamespace: a succeeded pod counts for its controller Job only in
// the Job's namespace: a pod someone made elsewhere, naming the Job's UID, releases nothing.
func TestSucceededWaitersOnlyInTheJobsNamespace(t *testing.T) {
	job := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "wait", Namespace: "wavegate-system", UID: "job-uid"}}
	pod := func(ns string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "wait-x", Namespace: ns,
				Labels:          map[string]string{keys.WaitJobLabel: "true", keys.WaitSequenceLabel: "platform"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "wait", UID: "job-uid", Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: corev1.PodSucceeded},
		}
	}
	for _, tc := range []struct {
		ns   string
		want bool
	}{{"wavegate-system", true}, {"tenant-a", false}} {
		c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(pod(tc.ns)).Build()
		r := &Reconciler{WaitPods: listOnly{r: c}}
		got, err := r.succeededWaiters(context.Background(), "platform", []batchv1.Job{job})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got["job-uid"]; ok != tc.want {
			t.Errorf("a succeeded pod in %s: counted %v, want %v", tc.ns, ok, tc.want)
		}
	}
}

// TestWaitJobStartsAtOnceWhenItsAccountExists: a wait Job starts at once in a namespace that has
// the waiter's ServiceAccount (its pod would be refused without one), and is created suspended,
// for the waiter-RBAC controller to resume, where it has none yet (or only one wavegate did not
// make).
func TestWaitJobStartsAtOnceWhenItsAccountExists(t *testing.T) {
	account := func(ns string, labels map[string]string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: WaiterServiceAccount, Namespace: ns, Labels: labels}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		account("ready", map[string]string{keys.WaiterRBACLabel: "true"}), account("foreign", nil)).Build()
	r := &Reconciler{Client: c, Image: "wavegate:test", Namespace: "wavegate-system"}
	for ns, suspended := range map[string]bool{"ready": false, "fresh": true, "foreign": true} {
		g := &Group{Name: "web", JobName: "wavegate-wait-web-0123456789", JobNamespace: ns}
		j, err := r.createJob(context.Background(), "shop", g)
		if err != nil {
			t.Fatal(err)
		}
		if got := ptr.Deref(j.Spec.Suspend, false); got != suspended {
			t.Errorf("wait Job in %s: suspended = %v, want %v", ns, got, suspended)
		}
		if j.Spec.ActiveDeadlineSeconds != nil {
			t.Errorf("wait Job in %s created armed: %d", ns, *j.Spec.ActiveDeadlineSeconds)
		}
	}
}
