package policy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

// Store holds the current Index, recompiled from the manager's cache whenever a WavePolicy changes.
// It runs on every replica (not only the leader): every replica serves admission.
type Store struct {
	cache   cache.Cache
	current atomic.Pointer[Index]
	mu      sync.Mutex // serialises recompiles so that an older list never overwrites a newer one
	// OnChange, if set before Start, is called after every recompile (it must not block): the
	// member tracker starts tracking a policy's new group label at once.
	OnChange func()
}

// NewStore returns a Store reading from c. Add it to the manager with mgr.Add.
func NewStore(c cache.Cache) *Store { return &Store{cache: c} }

// NewStaticStore returns a Store that always serves idx (tests, benchmarks, offline rendering).
func NewStaticStore(idx *Index) *Store {
	s := &Store{}
	s.current.Store(idx)
	return s
}

// Index returns the current index, or nil before the cache has synced.
func (s *Store) Index() *Index { return s.current.Load() }

// Synced reports whether the first index has been compiled.
func (s *Store) Synced() bool { return s.current.Load() != nil }

// NeedLeaderElection is false: every replica needs the policies.
func (s *Store) NeedLeaderElection() bool { return false }

// Start watches WavePolicies and recompiles on every change until ctx ends.
func (s *Store) Start(ctx context.Context) error {
	inf, err := s.cache.GetInformer(ctx, &wavev1.WavePolicy{})
	if err != nil {
		return fmt.Errorf("getting the WavePolicy informer: %w", err)
	}
	recompile := func(any) {
		if !s.Synced() {
			return // the first compile runs once the cache has synced
		}
		if err := s.recompile(ctx); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Recompiling WavePolicies")
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    recompile,
		UpdateFunc: func(_, o any) { recompile(o) },
		DeleteFunc: recompile,
	}); err != nil {
		return fmt.Errorf("watching WavePolicies: %w", err)
	}
	if !s.cache.WaitForCacheSync(ctx) {
		return errors.New("the WavePolicy cache did not sync")
	}
	if err := s.recompile(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func (s *Store) recompile(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var list wavev1.WavePolicyList
	if err := s.cache.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing WavePolicies: %w", err)
	}
	s.current.Store(Compile(list.Items))
	if s.OnChange != nil {
		s.OnChange()
	}
	return nil
}

// ReadyCheck is a healthz.Checker that passes once the policies are loaded.
func (s *Store) ReadyCheck(_ *http.Request) error {
	if !s.Synced() {
		return errors.New("WavePolicies not loaded yet")
	}
	return nil
}
