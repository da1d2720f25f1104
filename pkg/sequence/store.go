package sequence

import (
	"context"
	"errors"
	"fmt"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

// ClearedStore serves admission the pod templates whose new pods may start without a gate, from
// the Sequence objects in the cache. It runs on every replica.
type ClearedStore struct {
	cache cache.Cache
	// also are told every Sequence the store sees (nil: deleted), before the store is synced.
	also []func(sequence string, obj *wavev1.Sequence)

	mu      sync.RWMutex
	cleared map[string]map[string]map[string]bool // sequence -> group -> template
	synced  bool
}

// NewClearedStore returns a store reading Sequences from c; add it to the manager. also are told
// every Sequence it sees (teardown's view of the later groups, say).
func NewClearedStore(c cache.Cache, also ...func(sequence string, obj *wavev1.Sequence)) *ClearedStore {
	return &ClearedStore{cache: c, also: also}
}

// NeedLeaderElection is false: every replica serves admission.
func (s *ClearedStore) NeedLeaderElection() bool { return false }

// Start watches Sequences until ctx ends.
func (s *ClearedStore) Start(ctx context.Context) error {
	inf, err := s.cache.GetInformer(ctx, &wavev1.Sequence{})
	if err != nil {
		return fmt.Errorf("getting the Sequence informer: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.seen(o, false) },
		UpdateFunc: func(_, o any) { s.seen(o, false) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			s.seen(o, true)
		},
	}); err != nil {
		return fmt.Errorf("watching Sequences: %w", err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("the Sequence cache did not sync")
	}
	s.mu.Lock()
	s.synced = true
	s.mu.Unlock()
	<-ctx.Done()
	return nil
}

// seen is told of a Sequence object the cache added, changed or deleted. Only a sequence's own
// object (ownObject) speaks for it: a stray one (an earlier version's name) neither sets nor, when
// it goes, clears what the sequence's object says.
func (s *ClearedStore) seen(o any, deleted bool) {
	obj, ok := o.(*wavev1.Sequence)
	if !ok || !ownObject(obj) {
		return
	}
	if deleted {
		s.set(obj.Spec.Sequence, nil)
		return
	}
	s.set(obj.Spec.Sequence, obj)
}

func (s *ClearedStore) set(seq string, obj *wavev1.Sequence) {
	for _, f := range s.also {
		f(seq, obj)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cleared == nil {
		s.cleared = map[string]map[string]map[string]bool{}
	}
	if obj == nil {
		delete(s.cleared, seq)
		return
	}
	groups := map[string]map[string]bool{}
	for _, g := range obj.Status.Groups {
		if len(g.ClearedTemplates) == 0 {
			continue
		}
		t := make(map[string]bool, len(g.ClearedTemplates))
		for _, c := range g.ClearedTemplates {
			t[c] = true
		}
		groups[g.Name] = t
	}
	s.cleared[seq] = groups
}

// Clear records the templates the controller on this replica released a moment ago, by group, as
// cleared before the status that says so is written and seen: the consistent read that released
// them is the same that clears them in that status. The sequence's next status replaces them (a
// status older than the release, seen after it, only gates a few more pods until the next).
func (s *ClearedStore) Clear(seq string, released map[string][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cleared == nil {
		s.cleared = map[string]map[string]map[string]bool{}
	}
	groups := s.cleared[seq]
	if groups == nil {
		groups = map[string]map[string]bool{}
		s.cleared[seq] = groups
	}
	for g, templates := range released {
		if groups[g] == nil {
			groups[g] = make(map[string]bool, len(templates))
		}
		for _, t := range templates {
			groups[g][t] = true
		}
	}
}

// Cleared reports whether new pods of a template may start without the gate. Unknown means no:
// the pod is gated and the controller decides.
func (s *ClearedStore) Cleared(seq, group, template string) bool {
	if template == "" {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cleared[seq][group][template]
}

// Synced reports whether the Sequences are loaded.
func (s *ClearedStore) Synced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.synced
}
