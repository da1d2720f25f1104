// Package waiter is `wavegate wait`: the program a group's wait Job runs. It watches the group's
// members and exits as soon as all of them are ready (exit 0), when one fails for good (exit 3) or
// when the timeout passes (exit 2). It uses watches, never polling (only its access, which may come a
// moment after its pod starts, is waited for with a LIST retried at short intervals), and prints
// one line per change.
// When a member is a PersistentVolumeClaim it also watches StorageClasses, which decide whether a
// Pending claim waits for its first consumer (readiness.Env).
package waiter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/readiness"
)

// Exit codes of `wavegate wait`.
const (
	ExitReady   = 0
	ExitError   = 1
	ExitTimeout = 2
	ExitFailed  = 3
)

// ErrTimeout is returned when the members were not ready in time.
var ErrTimeout = errors.New("timed out")

// FailedError is returned when a member failed for good.
type FailedError struct{ Member, Message string }

func (e *FailedError) Error() string { return fmt.Sprintf("%s failed: %s", e.Member, e.Message) }

// ExitCode maps Wait's result to the process exit code.
func ExitCode(err error) int {
	var f *FailedError
	switch {
	case err == nil:
		return ExitReady
	case errors.Is(err, ErrTimeout):
		return ExitTimeout
	case errors.As(err, &f):
		return ExitFailed
	default:
		return ExitError
	}
}

// Member is one object to wait for: the object wavegate planned the group with, when UID and
// Generation are set. A view of it from an API server that has not seen that revision yet (another
// replica's watch cache, lagging) has another UID or an older generation, and is not ready.
type Member struct {
	GVR       schema.GroupVersionResource
	Namespace string
	Name      string
	// UID and Generation are the object's when the group was planned (empty, 0: any).
	UID        types.UID
	Generation int64
}

// String is the --member form: group/version/resource/namespace/name, then /uid/generation when
// known (names cannot contain "/").
func (m Member) String() string {
	parts := []string{m.GVR.Group, m.GVR.Version, m.GVR.Resource, m.Namespace, m.Name}
	if m.UID != "" || m.Generation != 0 {
		parts = append(parts, string(m.UID), strconv.FormatInt(m.Generation, 10))
	}
	return strings.Join(parts, "/")
}

// ParseMember parses the --member form.
func ParseMember(s string) (Member, error) {
	p := strings.Split(s, "/")
	if len(p) != 5 && len(p) != 7 || p[1] == "" || p[2] == "" || p[4] == "" {
		return Member{}, fmt.Errorf("member %q is not group/version/resource/namespace/name[/uid/generation]", s)
	}
	m := Member{GVR: schema.GroupVersionResource{Group: p[0], Version: p[1], Resource: p[2]}, Namespace: p[3], Name: p[4]}
	if len(p) == 7 {
		gen, err := strconv.ParseInt(p[6], 10, 64)
		if err != nil || gen < 0 {
			return Member{}, fmt.Errorf("member %q: the generation %q is not a non-negative integer", s, p[6])
		}
		m.UID, m.Generation = types.UID(p[5]), gen
	}
	return m, nil
}

func (m Member) display() string {
	r := m.GVR.Resource
	if m.GVR.Group != "" {
		r += "." + m.GVR.Group
	}
	if m.Namespace == "" {
		return r + "/" + m.Name
	}
	return r + "/" + m.Namespace + "/" + m.Name
}

// Options says what to wait for.
type Options struct {
	Sequence, Group string
	// Job is the wait Job to mark ready (namespace/name; empty: none), with Fingerprint: that of
	// the arguments the waiter was given (Args.Fingerprint).
	Job, Fingerprint string
	Members          []Member
	// Checker judges the members; NamespaceCheckers, those of the namespaces listed there.
	Checker           *readiness.Checker
	NamespaceCheckers map[string]*readiness.Checker
	// Timeout bounds the wait; zero means no bound (the Job's activeDeadlineSeconds still applies).
	Timeout time.Duration
	// Out receives the progress lines.
	Out io.Writer
}

type scope struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// Wait blocks until every member is ready, one fails for good, the timeout passes or ctx ends.
func Wait(ctx context.Context, client dynamic.Interface, o Options) error {
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.Timeout, ErrTimeout)
		defer cancel()
	}
	fmt.Fprintf(o.Out, "waiting for group %q of sequence %q: %d members\n", o.Group, o.Sequence, len(o.Members))

	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var env readiness.Env
	if hasClaims(o.Members) {
		w, err := watchStorageClasses(ctx, client, notify)
		if err != nil {
			return err
		}
		select {
		case <-w.settled:
		case <-ctx.Done():
			return finish(ctx, o)
		}
		env = readiness.FuncEnv(w.list)
	}
	listed, err := awaitAccess(ctx, client, o.Members, o.Out)
	if err != nil {
		return finish(ctx, o)
	}
	// The lists that found the access may already show every member ready (a group that became
	// ready while the waiter's pod started): then there is nothing to watch.
	if listed != nil {
		stores := map[scope]cache.Store{}
		for sc, list := range listed {
			stores[sc] = cache.NewStore(cache.MetaNamespaceKeyFunc)
			for i := range list.Items {
				_ = stores[sc].Add(&list.Items[i])
			}
		}
		if ready, _, failed := evaluate(o, stores, env); failed != nil {
			fmt.Fprintf(o.Out, "group %q cannot become ready: %v\n", o.Group, failed)
			return failed
		} else if ready == len(o.Members) {
			fmt.Fprintf(o.Out, "group %q is ready\n", o.Group)
			markReady(ctx, client, o)
			return nil
		}
	}
	// Every member's kind is watched at once, from those lists, and the wait for the informers'
	// first lists is signalled, not polled (WaitForCacheSync looks every 100 ms, one informer after
	// the other): the waiter's start is on the path of every group boundary it does not start
	// ahead of.
	stores := map[scope]cache.Store{}
	var synced []cache.DoneChecker
	for _, m := range o.Members {
		sc := scope{m.GVR, m.Namespace}
		if _, ok := stores[sc]; ok {
			continue
		}
		inf := cache.NewSharedIndexInformer(newListerWatcher(client, sc, listed[sc]), &unstructured.Unstructured{}, 0, cache.Indexers{})
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { notify() },
			UpdateFunc: func(any, any) { notify() },
			DeleteFunc: func(any) { notify() },
		}); err != nil {
			return fmt.Errorf("watching %s: %w", m.GVR, err)
		}
		go inf.RunWithContext(ctx)
		stores[sc] = inf.GetStore()
		synced = append(synced, inf.HasSyncedChecker())
	}
	if !cache.WaitFor(ctx, "", synced...) {
		return finish(ctx, o)
	}

	last := ""
	for {
		ready, lines, failed := evaluate(o, stores, env)
		if line := strings.Join(lines, "; "); line != last {
			fmt.Fprintf(o.Out, "%s %d/%d ready: %s\n", time.Now().UTC().Format(time.RFC3339), ready, len(o.Members), line)
			last = line
		}
		if failed != nil {
			fmt.Fprintf(o.Out, "group %q cannot become ready: %v\n", o.Group, failed)
			return failed
		}
		if ready == len(o.Members) {
			fmt.Fprintf(o.Out, "group %q is ready\n", o.Group)
			markReady(ctx, client, o)
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return finish(ctx, o)
		}
	}
}

var jobs = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}

// markReady annotates the wait Job with when its waiter found the group ready: wavegate's manager
// releases the next group on that at once, where this pod's exit is reported only at the kubelet's
// next PLEG relist (every second). The waiter's Role may allow the patch a moment after the Job
// exists: a forbidden patch is retried for a while; any failure leaves the release to the exit.
func markReady(ctx context.Context, client dynamic.Interface, o Options) {
	if o.Job == "" {
		return
	}
	ns, name, _ := strings.Cut(o.Job, "/")
	body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, keys.WaiterReadyAnnotation, time.Now().UTC().Format(time.RFC3339Nano),
		keys.WaiterCheckedAnnotation, o.Fingerprint)
	deadline := time.Now().Add(markReadyFor)
	for {
		_, err := client.Resource(jobs).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) || ctx.Err() != nil {
			fmt.Fprintf(o.Out, "could not mark wait Job %s ready (%v): the group is released once this pod's exit is reported\n", o.Job, err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(accessRetry):
		}
	}
}

// markReadyFor bounds the retries of a forbidden markReady: the exit reports the same a second or
// so later.
const markReadyFor = 2 * time.Second

// awaitAccess returns once the waiter may list every member's kind where it lives, or when ctx
// ends (its error), with what those lists found (nil unless every kind was listed). The waiter's
// Role is written by wavegate's manager while the waiter's pod starts, and may come a moment after
// it: an informer denied its first list would retry only after its back-off (0.8 s and more), so
// each kind is listed first, again and again at short intervals while it is forbidden. Any other
// error is left to the informers.
func awaitAccess(ctx context.Context, client dynamic.Interface, members []Member, out io.Writer) (map[scope]*unstructured.UnstructuredList, error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	lists := map[scope]*unstructured.UnstructuredList{}
	complete := true
	seen := map[scope]bool{}
	for _, m := range members {
		sc := scope{m.GVR, m.Namespace}
		if seen[sc] {
			continue
		}
		seen[sc] = true
		wg.Go(func() {
			start, wait := time.Now(), accessRetry
			for said := false; ; {
				// From the API server's watch cache, as an informer's first list: it may lag, which
				// the members' UIDs and generations catch (Member).
				list, err := client.Resource(sc.gvr).Namespace(sc.namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
				if !apierrors.IsForbidden(err) || ctx.Err() != nil {
					mu.Lock()
					defer mu.Unlock()
					if said && err == nil {
						fmt.Fprintf(out, "%s may list %s now\n", time.Now().UTC().Format(time.RFC3339), sc.display())
					}
					if err != nil {
						complete = false
						return
					}
					lists[sc] = list
					return
				}
				if !said {
					mu.Lock()
					fmt.Fprintf(out, "%s waiting for access to list %s (wavegate's manager grants it): %v\n", time.Now().UTC().Format(time.RFC3339), sc.display(), err)
					mu.Unlock()
					said = true
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				if time.Since(start) > accessRetryFor {
					wait = min(2*wait, maxAccessRetry)
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !complete {
		return nil, nil
	}
	return lists, nil
}

// seededListerWatcher lists and watches one member kind where it lives. Its first list is the one
// awaitAccess made (when it made one), so the informer starts watching from there instead of
// listing again; and it is never a streamed list (WatchList), which the API server serves only
// once its watch cache has caught up with etcd, up to 100 ms later on a busy cluster. Those views
// may lag: Member's UID and generation catch a member older than the wait Job's.
type seededListerWatcher struct {
	client dynamic.ResourceInterface
	mu     sync.Mutex
	first  *unstructured.UnstructuredList
}

func newListerWatcher(client dynamic.Interface, sc scope, first *unstructured.UnstructuredList) *seededListerWatcher {
	return &seededListerWatcher{client: client.Resource(sc.gvr).Namespace(sc.namespace), first: first}
}

func (l *seededListerWatcher) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	l.mu.Lock()
	first := l.first
	l.first = nil
	l.mu.Unlock()
	if first != nil {
		return first, nil
	}
	return l.client.List(ctx, o)
}

func (l *seededListerWatcher) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return l.client.Watch(ctx, o)
}

// List and Watch complete cache.ListerWatcher; the informer calls the context-aware methods.
func (l *seededListerWatcher) List(o metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), o)
}

func (l *seededListerWatcher) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), o)
}

// IsWatchListSemanticsUnSupported keeps the reflector from streaming its first list (see
// watchlist.DoesClientNotSupportWatchListSemantics).
func (l *seededListerWatcher) IsWatchListSemanticsUnSupported() bool { return true }

// A forbidden kind is tried again every accessRetry for accessRetryFor (the manager writes the
// Role within milliseconds of the Job), then less and less often, up to every maxAccessRetry.
const (
	accessRetry    = 25 * time.Millisecond
	accessRetryFor = 3 * time.Second
	maxAccessRetry = 2 * time.Second
)

func (s scope) display() string {
	r := s.gvr.Resource
	if s.gvr.Group != "" {
		r += "." + s.gvr.Group
	}
	if s.namespace == "" {
		return r
	}
	return r + " in namespace " + s.namespace
}

func finish(ctx context.Context, o Options) error {
	if errors.Is(context.Cause(ctx), ErrTimeout) {
		fmt.Fprintf(o.Out, "group %q was not ready within %s\n", o.Group, o.Timeout)
		return ErrTimeout
	}
	fmt.Fprintf(o.Out, "stopped before group %q was ready: %v\n", o.Group, context.Cause(ctx))
	return ctx.Err()
}

// evaluate returns how many members are ready, one line per member that is not, and a terminal
// failure if any.
func evaluate(o Options, stores map[scope]cache.Store, env readiness.Env) (int, []string, error) {
	ready := 0
	var lines []string
	var failed error
	for _, m := range o.Members {
		item, exists, _ := stores[scope{m.GVR, m.Namespace}].GetByKey(key(m))
		if !exists {
			lines = append(lines, m.display()+": not found")
			continue
		}
		obj := item.(*unstructured.Unstructured)
		if m.UID != "" && obj.GetUID() != m.UID {
			lines = append(lines, fmt.Sprintf("%s: uid %s is not this wait Job's %s (wavegate replaces a Job whose member was recreated)", m.display(), obj.GetUID(), m.UID))
			continue
		}
		if obj.GetGeneration() < m.Generation {
			lines = append(lines, fmt.Sprintf("%s: generation %d, older than this wait Job's %d (an API server that has not seen the change yet)", m.display(), obj.GetGeneration(), m.Generation))
			continue
		}
		checker := o.Checker
		if c, ok := o.NamespaceCheckers[m.Namespace]; ok {
			checker = c
		}
		res := checker.CheckIn(obj, env)
		if res.Status == readiness.Ready {
			ready++
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: %s", m.display(), res.Message))
		if res.Status == readiness.Failed && res.Terminal && failed == nil {
			failed = &FailedError{Member: m.display(), Message: res.Message}
		}
	}
	sort.Strings(lines)
	return ready, lines, failed
}

func key(m Member) string {
	if m.Namespace == "" {
		return m.Name
	}
	return m.Namespace + "/" + m.Name
}

var (
	claims         = schema.GroupResource{Resource: "persistentvolumeclaims"}
	storageClasses = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}
)

func hasClaims(members []Member) bool {
	for _, m := range members {
		if m.GVR.GroupResource() == claims {
			return true
		}
	}
	return false
}

// classWatch is a watch on StorageClasses that tolerates not being allowed to list them: the
// waiter's access to StorageClasses is granted by another controller and may come late. Until the
// watch has listed the classes, every lookup fails with the last error (Forbidden), which leaves a
// Pending claim in progress with a message saying its class could not be read; the watch keeps
// retrying and re-evaluates the members once it succeeds.
type classWatch struct {
	inf     cache.SharedIndexInformer
	settled chan struct{} // closed on the first list, or the first error
	once    sync.Once
	mu      sync.Mutex
	err     error
}

func watchStorageClasses(ctx context.Context, client dynamic.Interface, notify func()) (*classWatch, error) {
	w := &classWatch{
		inf:     dynamicinformer.NewFilteredDynamicInformer(client, storageClasses, "", 0, cache.Indexers{}, nil).Informer(),
		settled: make(chan struct{}),
	}
	if _, err := w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return nil, fmt.Errorf("watching %s: %w", storageClasses, err)
	}
	if err := w.inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		w.mu.Lock()
		w.err = err
		if se := (*apierrors.StatusError)(nil); errors.As(err, &se) {
			w.err = se // "storageclasses.storage.k8s.io is forbidden: ...", without the reflector's wrapping
		}
		w.mu.Unlock()
		w.settle()
		notify()
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return nil, fmt.Errorf("watching %s: %w", storageClasses, err)
	}
	go w.inf.RunWithContext(ctx)
	go func() {
		if cache.WaitFor(ctx, "", w.inf.HasSyncedChecker()) {
			w.settle()
			// With no StorageClasses at all, nothing else would announce the list.
			notify()
		}
	}()
	return w, nil
}

func (w *classWatch) settle() { w.once.Do(func() { close(w.settled) }) }

// list is a readiness.FuncEnv.
func (w *classWatch) list() ([]storagev1.StorageClass, error) {
	if !w.inf.HasSynced() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.err != nil {
			return nil, w.err
		}
		return nil, errors.New("StorageClasses not listed yet")
	}
	items := w.inf.GetStore().List()
	out := make([]storagev1.StorageClass, 0, len(items))
	for _, item := range items {
		u, ok := item.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var sc storagev1.StorageClass
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sc); err != nil {
			return nil, fmt.Errorf("StorageClass %s: %w", u.GetName(), err)
		}
		out = append(out, sc)
	}
	return out, nil
}
