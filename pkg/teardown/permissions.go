// Package teardown is ordered teardown, in one place: the hold that keeps a deleted member until
// every later group of its sequence is gone (hold.go, a step of the sequence reconcile), declared
// cleanup and forced removal, the DELETE check that admission serves (check.go, later.go), knowing
// which kinds the manager may remove a finalizer from (permissions.go), and releasing every
// wavegate finalizer and gate when wavegate is uninstalled (uninstall.go).
package teardown

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
)

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=selfsubjectrulesreviews,verbs=create

// Permissions knows which resources the manager may patch, list and watch, so that admission never
// adds a finalizer that no wavegate controller could remove, warns about members of kinds the
// member tracker may not track, and the tracker tracks only those it may. It asks the API server
// with a SelfSubjectRulesReview in the background, never per admission request.
type Permissions struct {
	Client kubernetes.Interface
	// Every is how often the review is refreshed (aggregated ClusterRoles change).
	Every time.Duration

	mu    sync.RWMutex
	rules []authorizationv1.ResourceRule
	ready bool
}

// NeedLeaderElection is false: every replica admits.
func (p *Permissions) NeedLeaderElection() bool { return false }

// Start refreshes the rules until ctx ends.
func (p *Permissions) Start(ctx context.Context) error {
	every := p.Every
	if every == 0 {
		every = 30 * time.Second
	}
	for {
		if err := p.Refresh(ctx); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Reviewing the manager's permissions")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// reviewNamespace is where the rules are reviewed: a name no namespace can have (namespace names
// have no dots), so that no RoleBinding applies there and the review returns only what the manager
// may do in every namespace. Admission adds finalizers in every namespace; a Role in one (wavegate's
// own, where the review was asked before) must not count for all.
const reviewNamespace = "cluster-wide.wavegate.io"

// Refresh asks the API server once.
func (p *Permissions) Refresh(ctx context.Context) error {
	review, err := p.Client.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: reviewNamespace}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating a SelfSubjectRulesReview: %w", err)
	}
	p.mu.Lock()
	p.rules, p.ready = review.Status.ResourceRules, true
	p.mu.Unlock()
	return nil
}

// CanPatch reports whether the manager may patch resource in group. Unknown means no.
func (p *Permissions) CanPatch(group, resource string) bool {
	return p.allows(group, resource, "patch")
}

// CanWatch reports whether the manager may list and watch resource in group. Unknown means no.
func (p *Permissions) CanWatch(group, resource string) bool {
	return p.allows(group, resource, "list", "watch")
}

func (p *Permissions) allows(group, resource string, verbs ...string) bool {
	if p == nil {
		return false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, verb := range verbs {
		// A rule limited to named objects (wavegate's own webhook configurations) grants nothing
		// on the objects of users.
		if !slices.ContainsFunc(p.rules, func(r authorizationv1.ResourceRule) bool {
			return len(r.ResourceNames) == 0 && matches(r.APIGroups, group) && matches(r.Resources, resource) && matches(r.Verbs, verb)
		}) {
			return false
		}
	}
	return true
}

func matches(set []string, v string) bool {
	return slices.Contains(set, v) || slices.Contains(set, "*")
}

// Ready reports whether the permissions have been reviewed once: until then CanPatch and CanWatch
// say no because nothing is known yet, not because the manager may not.
func (p *Permissions) Ready() bool {
	if p == nil {
		return false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ready
}
