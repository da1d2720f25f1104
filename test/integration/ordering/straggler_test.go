package ordering

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/sequence"
)

// memberReads sees the manager's requests (framework.Env.ManagerTransport): it counts, per
// namespace, the metadata LISTs of its Deployments (one per consistent read of a sequence's
// members), and runs a test's callback once, after the API server answered one and before the
// manager reads the answer.
type memberReads struct {
	mu    sync.Mutex
	count map[string]int
	after map[string]func()
}

var reads = &memberReads{count: map[string]int{}, after: map[string]func(){}}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (h *memberReads) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		ns, ok := deploymentMetadataList(req)
		if !ok || err != nil {
			return resp, err
		}
		h.mu.Lock()
		h.count[ns]++
		f := h.after[ns]
		delete(h.after, ns)
		h.mu.Unlock()
		if f != nil {
			f()
		}
		return resp, err
	})
}

// deploymentMetadataList reports whether req lists the metadata of one namespace's Deployments,
// and which.
func deploymentMetadataList(req *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(req.URL.Path, "/apis/apps/v1/namespaces/")
	ns, res, _ := strings.Cut(rest, "/")
	if !ok || res != "deployments" || req.Method != http.MethodGet || req.URL.Query().Get("watch") != "" {
		return "", false
	}
	return ns, strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadataList")
}

func (h *memberReads) afterFirst(ns string, f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.after[ns] = f
}

func (h *memberReads) of(ns string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count[ns]
}

// TestStragglerReleasedWithItsSiblings: a pass releases, with the gated pods its cache showed when
// it began, those of the same template and group that its cache shows by the time it decides (a
// ReplicaSet still creating them). Here the second pod is created right after the pass's consistent
// read of the members has been answered, and the manager's cache has it before the pass decides:
// the same pass releases it, and no pass reads the members again (without the straggler release,
// another pass and another consistent read release it).
func TestStragglerReleasedWithItsSiblings(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	// The group's member, and the pods its ReplicaSet would create from its template (none runs
	// here: podOf's shape, owned by the Deployment).
	d := deployment(ns, "web", member("web", 1))
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	pod := func(name string) *corev1.Pod {
		l := map[string]string{keys.PodTemplateHashLabel: "v1"}
		for k, v := range d.Spec.Template.Labels {
			l[k] = v
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptr.To(true)}}},
			Spec: d.Spec.Template.Spec}
	}
	straggler := pod("web-2")
	var hookErr error
	seen := make(chan struct{})
	reads.afterFirst(ns, func() {
		defer close(seen)
		if hookErr = env.Client.Create(ctx, straggler); hookErr != nil {
			return
		}
		hookErr = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			p := &corev1.Pod{}
			return mgr.GetCache().Get(ctx, client.ObjectKeyFromObject(straggler), p) == nil && sequence.HasGate(p), nil
		})
	})
	first := pod("web-1")
	g.Expect(env.Client.Create(ctx, first)).To(Succeed())
	g.Eventually(seen).WithTimeout(timeout).Should(BeClosed(), "no pass read the namespace's members")
	g.Expect(hookErr).NotTo(HaveOccurred())
	before := reads.of(ns)
	eventuallyUngated(t, first)
	eventuallyUngated(t, straggler)
	g.Expect(reads.of(ns)).To(Equal(before), "the straggler waited for another pass and another read")
}
