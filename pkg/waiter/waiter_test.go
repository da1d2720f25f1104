package waiter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/readiness"
)

func parse(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	var raw json.RawMessage
	if err := utilyaml.NewYAMLToJSONDecoder(strings.NewReader(doc)).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	return u
}

// output collects the progress lines and reports when one contains a string.
type output struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	watch string
	seen  chan struct{}
}

func newOutput(watch string) *output { return &output{watch: watch, seen: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := o.buf.Write(p)
	if o.watch != "" && strings.Contains(o.buf.String(), o.watch) {
		close(o.seen)
		o.watch = ""
	}
	return n, err
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

const (
	pendingClaim = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: ns}
spec: {storageClassName: wffc, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
status: {phase: Pending}`
	wffcClass = `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: wffc}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer`
)

var (
	claimGVR = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	claim    = Member{GVR: claimGVR, Namespace: "ns", Name: "data"}
	cms      = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

func newClient(t *testing.T, objs ...string) *dynamicfake.FakeDynamicClient {
	t.Helper()
	var parsed []runtime.Object
	for _, o := range objs {
		parsed = append(parsed, parse(t, o))
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		claimGVR:       "PersistentVolumeClaimList",
		storageClasses: "StorageClassList",
		cms:            "ConfigMapList",
		jobs:           "JobList",
	}, parsed...)
}

func options(t *testing.T, out *output, timeout time.Duration, members ...Member) Options {
	t.Helper()
	c, err := readiness.NewChecker(wavev1.Readiness{})
	if err != nil {
		t.Fatal(err)
	}
	return Options{Sequence: "s", Group: "g", Members: members, Checker: c, Timeout: timeout, Out: out}
}

func forbidden() error {
	return apierrors.NewForbidden(schema.GroupResource{Group: "storage.k8s.io", Resource: "storageclasses"}, "",
		errors.New(`User "system:serviceaccount:ns:wavegate-waiter" cannot list resource "storageclasses"`))
}

// A claim that waits for its first consumer releases its group: the consumer may be in a later one.
func TestWaitClaimWaitingForItsFirstConsumer(t *testing.T) {
	out := newOutput("")
	err := Wait(context.Background(), newClient(t, pendingClaim, wffcClass), options(t, out, 10*time.Second, claim))
	if err != nil {
		t.Fatalf("Wait() = %v, want nil; output:\n%s", err, out)
	}
	if !strings.Contains(out.String(), `group "g" is ready`) {
		t.Errorf("output does not say the group is ready:\n%s", out)
	}
}

// The claim is re-evaluated when its StorageClass appears: the waiter watches StorageClasses too.
func TestWaitClaimWhoseClassAppearsLater(t *testing.T) {
	client := newClient(t, pendingClaim)
	out := newOutput("StorageClass wffc not found")
	done := make(chan error, 1)
	go func() { done <- Wait(context.Background(), client, options(t, out, 10*time.Second, claim)) }()
	select {
	case <-out.seen:
	case err := <-done:
		t.Fatalf("Wait() = %v before the class existed; output:\n%s", err, out)
	}
	if _, err := client.Resource(storageClasses).Create(context.Background(), parse(t, wffcClass), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait() = %v, want nil; output:\n%s", err, out)
	}
}

// Without access to StorageClasses a pending claim stays in progress, saying why.
func TestWaitStorageClassesForbidden(t *testing.T) {
	client := newClient(t, pendingClaim, wffcClass)
	client.PrependReactor("list", "storageclasses", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, forbidden()
	})
	out := newOutput("")
	err := Wait(context.Background(), client, options(t, out, 2*time.Second, claim))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Wait() = %v, want ErrTimeout; output:\n%s", err, out)
	}
	if want := "StorageClass wffc could not be read: storageclasses.storage.k8s.io is forbidden"; !strings.Contains(out.String(), want) {
		t.Errorf("output does not contain %q:\n%s", want, out)
	}
}

// Access granted late (the RBAC controller is another process): the waiter keeps trying and
// releases the group once it can read the class.
func TestWaitStorageClassesForbiddenThenAllowed(t *testing.T) {
	client := newClient(t, pendingClaim, wffcClass)
	var allowed atomic.Bool
	client.PrependReactor("list", "storageclasses", func(clienttesting.Action) (bool, runtime.Object, error) {
		if allowed.Load() {
			return false, nil, nil
		}
		return true, nil, forbidden()
	})
	out := newOutput("could not be read")
	waitThroughForbidden(t, client, options(t, out, 30*time.Second, claim), out, &allowed)
}

// waitThroughForbidden runs Wait while it is forbidden to read, until out shows what it watches
// for; then allows the reads and expects Wait to return nil.
func waitThroughForbidden(t *testing.T, client dynamic.Interface, o Options, out *output, allowed *atomic.Bool) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- Wait(context.Background(), client, o) }()
	select {
	case <-out.seen:
	case err := <-done:
		t.Fatalf("Wait() = %v while forbidden; output:\n%s", err, out)
	}
	allowed.Store(true)
	if err := <-done; err != nil {
		t.Fatalf("Wait() = %v, want nil; output:\n%s", err, out)
	}
}

// Without claims among the members the waiter does not touch StorageClasses.
func TestWaitWithoutClaimsDoesNotReadStorageClasses(t *testing.T) {
	client := newClient(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: ns}}`)
	client.PrependReactor("*", "storageclasses", func(a clienttesting.Action) (bool, runtime.Object, error) {
		t.Errorf("unexpected %s on storageclasses", a.GetVerb())
		return true, nil, forbidden()
	})
	out := newOutput("")
	if err := Wait(context.Background(), client, options(t, out, 10*time.Second, Member{GVR: cms, Namespace: "ns", Name: "c"})); err != nil {
		t.Fatalf("Wait() = %v, want nil; output:\n%s", err, out)
	}
}

// The waiter's pod may start before wavegate's manager has granted it its Role: it waits for its
// access by retrying its first LIST at short intervals, says so, and does not wait out an
// informer's back-off (0.8 s and more) once the access exists.
func TestWaitForbiddenUntilItsAccessExists(t *testing.T) {
	client := newClient(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: ns}}`)
	var allowed atomic.Bool
	client.PrependReactor("list", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		if allowed.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "",
			errors.New(`User "system:serviceaccount:ns:wavegate-waiter" cannot list resource "configmaps"`))
	})
	out := newOutput("waiting for access to list configmaps in namespace ns")
	waitThroughForbidden(t, client, options(t, out, 30*time.Second, Member{GVR: cms, Namespace: "ns", Name: "c"}), out, &allowed)
	if !strings.Contains(out.String(), "may list configmaps in namespace ns now") {
		t.Errorf("output does not say the access came:\n%s", out)
	}
}

// A group whose members are all ready when the waiter may first read them is released on those
// lists: no watch is started.
func TestWaitReadyAtTheFirstList(t *testing.T) {
	client := newClient(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: ns}}`)
	client.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		t.Errorf("a watch on %s was started", a.GetResource())
		return false, nil, nil
	})
	out := newOutput("")
	if err := Wait(context.Background(), client, options(t, out, 10*time.Second, Member{GVR: cms, Namespace: "ns", Name: "c"})); err != nil {
		t.Fatalf("Wait() = %v, want nil; output:\n%s", err, out)
	}
	if !strings.Contains(out.String(), `group "g" is ready`) {
		t.Errorf("output does not say the group is ready:\n%s", out)
	}
}

// A member read from an API server whose cache has not seen the wait Job's revision yet (another
// replica's, lagging) is not ready, whatever its status says: an older generation, or the object
// a recreated member replaced. The group is ready once the view reaches the planned object.
func TestWaitStaleViewIsNotReady(t *testing.T) {
	for name, tc := range map[string]struct{ stale, current, want string }{
		"an older generation": {
			stale:   `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: ns, uid: u1, generation: 1}}`,
			current: `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: ns, uid: u1, generation: 2}}`,
			want:    "generation 1, older than this wait Job's 2",
		},
		"the object it replaced": {
			stale:   `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: ns, uid: u0, generation: 2}}`,
			current: `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: ns, uid: u1, generation: 2}}`,
			want:    "uid u0 is not this wait Job's u1",
		},
	} {
		t.Run(name, func(t *testing.T) {
			client := newClient(t, tc.stale)
			out := newOutput(tc.want)
			done := make(chan error, 1)
			go func() {
				done <- Wait(context.Background(), client, options(t, out, 30*time.Second,
					Member{GVR: cms, Namespace: "ns", Name: "c", UID: "u1", Generation: 2}))
			}()
			select {
			case <-out.seen:
			case err := <-done:
				t.Fatalf("Wait() = %v on a stale view; output:\n%s", err, out)
			case <-time.After(10 * time.Second):
				t.Fatalf("the waiter did not say why the stale member is not ready; output:\n%s", out)
			}
			if _, err := client.Resource(cms).Namespace("ns").Update(context.Background(), parse(t, tc.current), metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Wait() = %v, want nil; output:\n%s", err, out)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the waiter did not see the planned object; output:\n%s", out)
			}
		})
	}
}

// The waiter lists each member kind once: its watches start from the lists that found its access,
// not from a second list per kind (nor a streamed one, which the API server answers only once its
// watch cache has caught up with etcd).
func TestWaitWatchesFromItsFirstLists(t *testing.T) {
	client := newClient(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: ns}}`)
	var lists atomic.Int32
	client.PrependReactor("list", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		return false, nil, nil
	})
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("configmaps", func(clienttesting.Action) (bool, watch.Interface, error) {
		once.Do(func() { close(watching) })
		return false, nil, nil
	})
	out := newOutput("")
	done := make(chan error, 1)
	go func() {
		done <- Wait(context.Background(), client, options(t, out, 30*time.Second,
			Member{GVR: cms, Namespace: "ns", Name: "a"}, Member{GVR: cms, Namespace: "ns", Name: "b"}))
	}()
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatalf("no watch started; output:\n%s", out)
	}
	if _, err := client.Resource(cms).Namespace("ns").Create(context.Background(),
		parse(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: b, namespace: ns}}`), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait() = %v, want nil; output:\n%s", err, out)
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("configmaps were listed %d times, want once", n)
	}
}

// A waiter that finds its group ready marks its Job with when, and with what it judged (the manager releases the next
// group on that, before the kubelet reports the exit), retrying while its Role does not allow it
// yet.
func TestWaitMarksItsJobReady(t *testing.T) {
	client := newClient(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: ns}}`,
		`{apiVersion: batch/v1, kind: Job, metadata: {name: wj, namespace: ns}}`)
	var refused atomic.Int32
	client.PrependReactor("patch", "jobs", func(clienttesting.Action) (bool, runtime.Object, error) {
		if refused.Add(1) <= 2 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "wj",
				errors.New(`User "system:serviceaccount:ns:wavegate-waiter" cannot patch resource "jobs"`))
		}
		return false, nil, nil
	})
	out := newOutput("")
	o := options(t, out, 10*time.Second, Member{GVR: cms, Namespace: "ns", Name: "c"})
	o.Job, o.Fingerprint = "ns/wj", "0123456789abcdef"
	before := time.Now()
	if err := Wait(context.Background(), client, o); err != nil {
		t.Fatalf("Wait() = %v, want nil; output:\n%s", err, out)
	}
	job, err := client.Resource(jobs).Namespace("ns").Get(context.Background(), "wj", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339Nano, job.GetAnnotations()[keys.WaiterReadyAnnotation])
	if err != nil || at.Before(before) {
		t.Errorf("the Job's %s = %q, want when the group was found ready; output:\n%s", keys.WaiterReadyAnnotation,
			job.GetAnnotations()[keys.WaiterReadyAnnotation], out)
	}
	if got := job.GetAnnotations()[keys.WaiterCheckedAnnotation]; got != o.Fingerprint {
		t.Errorf("the Job's %s = %q, want the fingerprint of what the waiter judged, %q", keys.WaiterCheckedAnnotation, got, o.Fingerprint)
	}
}

// In a shared sequence the policies of two namespaces may define one group with different
// readiness settings: each member is judged by its own namespace's, not by those of the member
// that orders the group, or a member its own policy calls not ready would release the group.
func TestWaitJudgesEachNamespaceByItsOwnSettings(t *testing.T) {
	strict, err := readiness.NewChecker(wavev1.Readiness{Rules: []wavev1.ReadinessRule{
		{APIVersion: "v1", Kind: "ConfigMap", Current: `has(self.data) && has(self.data.ready) && self.data.ready == "true"`}}})
	if err != nil {
		t.Fatal(err)
	}
	const lenientCM = `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: lenient}}`
	members := []Member{{GVR: cms, Namespace: "lenient", Name: "c"}, {GVR: cms, Namespace: "strict", Name: "c"}}

	out := newOutput("")
	o := options(t, out, 2*time.Second, members...)
	o.NamespaceCheckers = map[string]*readiness.Checker{"strict": strict}
	err = Wait(context.Background(), newClient(t, lenientCM, `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: strict}}`), o)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Wait() = %v, want ErrTimeout: the member of namespace strict is not ready by its own settings; output:\n%s", err, out)
	}
	if want := "configmaps/strict/c"; !strings.Contains(out.String(), want) {
		t.Errorf("the output does not name %s, the member that is not ready:\n%s", want, out)
	}

	// The other way round: the group's settings are the strict ones, and namespace lenient's
	// member is judged by its own.
	out = newOutput("")
	o = options(t, out, 10*time.Second, members...)
	o.Checker, o.NamespaceCheckers = strict, map[string]*readiness.Checker{"lenient": o.Checker}
	err = Wait(context.Background(), newClient(t, lenientCM, `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: strict}, data: {ready: "true"}}`), o)
	if err != nil {
		t.Fatalf("Wait() = %v, want nil: each member is ready by its own namespace's settings; output:\n%s", err, out)
	}
}
