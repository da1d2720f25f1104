package sequence

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
)

// scope tells, once per reconcile and from the cache, which namespaces wavegate acts in (opted in
// with keys.EnabledLabel, never kube-system or wavegate's own) and their labels, which policies and
// shared sequences select namespaces by.
type scope struct {
	reader client.Reader
	own    string
	seen   map[string]*corev1.Namespace // nil: not found
}

func newScope(r client.Reader, ownNamespace string) *scope {
	return &scope{reader: r, own: ownNamespace, seen: map[string]*corev1.Namespace{}}
}

func (s *scope) namespace(ctx context.Context, name string) *corev1.Namespace {
	if ns, ok := s.seen[name]; ok {
		return ns
	}
	ns := &corev1.Namespace{}
	if err := s.reader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		ns = nil
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
	ns := s.namespace(ctx, name)
	return ns != nil && ns.Labels[keys.EnabledLabel] == "true"
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

// split separates the objects wavegate acts on from those in namespaces that are not opted in.
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
