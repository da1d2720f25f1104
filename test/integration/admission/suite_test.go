// Package admission tests wavegate's mutating webhook through a real kube-apiserver, with the
// webhook configuration rendered from config/webhook.
package admission

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/manager"
	"wavegate.io/wavegate/test/framework"
)

var (
	env *framework.Env
	mgr *framework.Manager
)

func TestMain(m *testing.M) {
	os.Exit(framework.RunSuite(m, &env, &mgr, func() error {
		env.ManagerTransport = refusedSequences.wrap
		return nil
	}, nil))
}

// refusedSequences counts the manager's writes of Sequence objects that the API server refused as
// invalid (422): a Sequence named after no valid sequence.
var refusedSequences = &refusedWrites{resource: "/sequences"}

type refusedWrites struct {
	resource string
	n        atomic.Int64
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (w *refusedWrites) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, w.resource) &&
			resp.StatusCode == http.StatusUnprocessableEntity {
			w.n.Add(1)
		}
		return resp, err
	})
}

// namespace creates a namespace, opted in or not, that is deleted after the test.
func namespace(t *testing.T, optedIn bool) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "wg-"}}
	if optedIn {
		ns.Labels = map[string]string{keys.EnabledLabel: "true"}
	}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// warnings records the API server's warnings (including admission warnings) seen by one client.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// clientWithWarnings returns a client whose warnings the test can read.
func clientWithWarnings(t *testing.T) (client.Client, *warnings) {
	t.Helper()
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandlerWithContext = w
	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

func labels(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// resolvedAnnotations is what wavegate stamps for a sequence, group, group order and wave.
func resolvedAnnotations(seq, group, groupOrder, wave string) map[string]string {
	return map[string]string{
		keys.ResolvedSequenceAnnotation: seq, keys.ResolvedGroupAnnotation: group,
		keys.ResolvedGroupOrderAnnotation: groupOrder, keys.ResolvedWaveAnnotation: wave,
		keys.ArgoCDSyncWaveAnnotation: wave,
	}
}

func haveAnnotations(want map[string]string) OmegaMatcher {
	return WithTransform(func(o client.Object) map[string]string { return o.GetAnnotations() }, SatisfyAll(
		WithTransform(func(got map[string]string) bool { return framework.ContainsAll(got, want) }, BeTrue()),
	))
}
