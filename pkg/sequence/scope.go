package sequence

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
)

// scope tells, once per reconcile and from the cache, which namespaces wavegate acts in (opted in
// with keys.EnabledLabel, never kube-system or wavegate's own) and their labels, which policies and
// shared sequences select namespaces by. The cache may lag: a namespace created by the same apply
// as its pods, or labeled a moment before, can reach the pod cache first. So a namespace the cache
// does not have is read from the API server (live), and what would release something because a
// namespace is not in scope (its pods' gates, its members' finalizers) or leave its members out of
// the consistent read is confirmed there first (confirmedOut): a lagging namespace cache never
// releases a gate early.
type scope struct {
	reader client.Reader
	// live reads namespaces from the API server (nil: the cache is trusted, in tests).
	live client.Reader
	own  string
	seen map[string]*corev1.Namespace // nil: not found
	// out remembers the namespaces refresh has read.
	out map[string]bool
}

func newScope(r client.Reader, ownNamespace string) *scope {
	return &scope{reader: r, own: ownNamespace, seen: map[string]*corev1.Namespace{}, out: map[string]bool{}}
}

// withLive makes the scope read from the API server what its cache cannot be trusted with.
func (s *scope) withLive(live client.Reader) *scope {
	s.live = live
	return s
}

func (s *scope) namespace(ctx context.Context, name string) *corev1.Namespace {
	if ns, ok := s.seen[name]; ok {
		return ns
	}
	ns := &corev1.Namespace{}
	if err := s.reader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		ns = nil
		// Not in the cache yet (created a moment ago): the API server knows.
		if live := (&corev1.Namespace{}); s.live != nil && apierrors.IsNotFound(err) && s.live.Get(ctx, client.ObjectKey{Name: name}, live) == nil {
			ns = live
		}
	}
	s.seen[name] = ns
	return ns
}

// OptedIn reports whether wavegate acts on objects of a namespace; "" (cluster-scoped) is in scope.
func (s *scope) OptedIn(ctx context.Context, name string) bool {
	if name == "" {
		return true
	}
	if name == "kube-system" || name == s.own {
		return false
	}
	return isOptedIn(s.namespace(ctx, name))
}

func isOptedIn(ns *corev1.Namespace) bool {
	return ns != nil && ns.Labels[keys.EnabledLabel] == "true"
}

// confirmedOut reports whether a namespace the cache shows out of scope is so on the API server
// too: not opted in, or gone. When the read fails it is not (nothing is released on a guess); the
// pass that would act on it is retried later.
func (s *scope) confirmedOut(ctx context.Context, name string) bool {
	if s.OptedIn(ctx, name) {
		return false
	}
	return (name == "kube-system" || name == s.own || s.refresh(ctx, name)) && !s.OptedIn(ctx, name)
}

// refresh reads a namespace from the API server once per pass: its labels (what selects
// namespaces) and whether it is opted in are the live ones from then on. It reports false when the
// read fails. Without a live reader the cache is trusted.
func (s *scope) refresh(ctx context.Context, name string) bool {
	if s.live == nil {
		return true
	}
	if ok, done := s.out[name]; done {
		return ok
	}
	ns := &corev1.Namespace{}
	switch err := s.live.Get(ctx, client.ObjectKey{Name: name}, ns); {
	case apierrors.IsNotFound(err):
		s.seen[name] = nil
	case err != nil:
		return false
	default:
		s.seen[name] = ns
	}
	s.out[name] = true
	return true
}

// Labels returns a namespace's labels (nil for "" or a namespace that is gone).
func (s *scope) Labels(ctx context.Context, name string) map[string]string {
	if name == "" {
		return nil
	}
	if ns := s.namespace(ctx, name); ns != nil {
		return ns.Labels
	}
	return nil
}

// split separates the objects wavegate acts on from those in namespaces that are not opted in
// (on the cache: releasing what is out is confirmed with confirmedOut).
func (s *scope) split(ctx context.Context, objs []members.Object) (in, out []members.Object) {
	for _, o := range objs {
		if o.Kind.Namespaced && !s.OptedIn(ctx, o.GetNamespace()) {
			out = append(out, o)
			continue
		}
		in = append(in, o)
	}
	return in, out
}
