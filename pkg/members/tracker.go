// Package members tracks the group members of every sequence: objects of any kind that carry a
// group label. It runs one label-selected informer per (kind, group label), so unlabeled objects
// are never cached, and strips managedFields and last-applied annotations from what it keeps.
package members

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"

	"wavegate.io/wavegate/pkg/keys"
)

// SequenceIndex indexes tracked objects by the sequence they belong to.
const SequenceIndex = keys.SequenceIndex

// Skipped reports whether objects of a resource are never group members: derived objects that
// inherit a member's labels (EndpointSlices copy a Service's, ControllerRevisions a StatefulSet's)
// and high-volume ones. Admission leaves them alone too.
func Skipped(gr schema.GroupResource) bool { return skipped[gr] }

var skipped = map[schema.GroupResource]bool{
	{Resource: "events"}:                                    true,
	{Group: "events.k8s.io", Resource: "events"}:            true,
	{Group: "coordination.k8s.io", Resource: "leases"}:      true,
	{Resource: "endpoints"}:                                 true,
	{Group: "discovery.k8s.io", Resource: "endpointslices"}: true,
	{Group: "apps", Resource: "controllerrevisions"}:        true,
	// Pods are gated, not members: their workload is the member.
	{Resource: "pods"}: true,
	// wavegate never reads Secrets.
	{Resource: "secrets"}: true,
	// Deprecated, and not objects anyone applies.
	{Resource: "componentstatuses"}: true,
}

// Kind is a tracked resource.
type Kind struct {
	GVR        schema.GroupVersionResource
	GVK        schema.GroupVersionKind
	Namespaced bool
}

// NamespaceOf returns the namespace of an object of the kind: "" for a cluster-scoped kind.
func (k Kind) NamespaceOf(o metav1.Object) string {
	if !k.Namespaced {
		return ""
	}
	return o.GetNamespace()
}

type informerKey struct {
	gvr   schema.GroupVersionResource
	label string
}

type tracked struct {
	kind     Kind
	label    string
	started  time.Time
	stall    time.Duration
	informer cache.SharedIndexInformer
	arrivals arrivals
	ctx      context.Context
	cancel   context.CancelFunc
	health   listHealth
}

// listHealth is what an informer's reflector last reported through its watch error handler: the
// error that ended its last list and watch, and where the informer stood then. The error stands
// until the informer moves on from there: it syncs, or its resource version changes (a later LIST
// succeeded, or its watch delivered an event or a bookmark).
type listHealth struct {
	mu     sync.Mutex
	err    error
	rv     string
	synced bool
}

// failing returns the LIST or WATCH error that stands for the informer, or nil.
func (tr *tracked) failing() error {
	tr.health.mu.Lock()
	defer tr.health.mu.Unlock()
	return tr.failingLocked()
}

func (tr *tracked) failingLocked() error {
	if tr.health.err == nil || tr.informer.HasSynced() != tr.health.synced || tr.informer.LastSyncResourceVersion() != tr.health.rv {
		return nil
	}
	return tr.health.err
}

// pending reports whether Refresh and HasSynced wait for the informer: it has not synced, and no
// LIST of it has failed. One that keeps failing (an aggregated API that is down, a CRD whose
// conversion webhook is down) is unavailable, not pending: waiting for it would stop every sequence
// of every namespace, where only those that have members of its kind must wait (Unavailable).
func (tr *tracked) pending() bool {
	return !tr.informer.HasSynced() && tr.failing() == nil && !tr.stalled()
}

// stalled reports whether an informer has not listed within its tracker's ListStall of its start.
func (tr *tracked) stalled() bool {
	return !tr.started.IsZero() && !tr.informer.HasSynced() && time.Since(tr.started) >= tr.stall
}

// listStall is ListStall, defaulted.
func (t *Tracker) listStall() time.Duration {
	if t.ListStall > 0 {
		return t.ListStall
	}
	return 30 * time.Second
}

// benignWatchError reports whether a reflector's error is not a failure of the kind: the ordinary
// end of a watch (closed, or too old to resume), after which it lists again, or the API server
// itself refusing connections (every kind fails alike, and nothing else works either; an
// aggregated API that is down answers 503 through the API server).
func benignWatchError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.Canceled) ||
		apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || utilnet.IsConnectionRefused(err) ||
		// A watch from a resource version the API server's cache has not reached yet: the reflector
		// lists again by itself.
		apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) ||
		// The connection dropped (an API server restarting, a load balancer): the reflector
		// reconnects, and every kind fails alike.
		utilnet.IsProbableEOF(err) || utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err)
}

// ResourceString is how a group's resources appear in the Sequence status: <group>/<version>/<resource>,
// or <version>/<resource> for the core group.
func ResourceString(gvr schema.GroupVersionResource) string {
	return gvr.GroupVersion().String() + "/" + gvr.Resource
}

// ParseResource reads a resource written by ResourceString.
func ParseResource(s string) (schema.GroupVersionResource, error) {
	i := strings.LastIndex(s, "/")
	if i <= 0 || i == len(s)-1 {
		return schema.GroupVersionResource{}, fmt.Errorf("resource %q is not <group>/<version>/<resource>", s)
	}
	gv, err := schema.ParseGroupVersion(s[:i])
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("resource %q: %w", s, err)
	}
	return gv.WithResource(s[i+1:]), nil
}

// Tracker keeps label-selected informers for every listable kind and group label.
type Tracker struct {
	Dynamic   dynamic.Interface
	Metadata  metadata.Interface
	Discovery discovery.DiscoveryInterface
	// GroupLabels returns the label keys that carry groups (wavegate.io/group first).
	GroupLabels func() []string
	// OnChange is called with the sequence of every object that is added, changed or deleted.
	OnChange func(sequence string)
	// Resync is how often discovery is refreshed to pick up new CRDs.
	Resync time.Duration
	// CanWatch says whether the manager may list and watch a resource; kinds it may not are not
	// tracked (grant them with the aggregated ClusterRole label), except a kind tracked before,
	// which keeps what it holds and is unavailable (see Unavailable). Nil tracks every kind.
	CanWatch func(group, resource string) bool
	// Ready, when set, is waited for before the first discovery (the permission review).
	Ready func() bool
	// ListStall is how long an informer may take to list before its kind is unavailable (0: 30 s):
	// a LIST that neither ends nor fails (an aggregated API that hangs; a streamed list waits up to
	// the API server's watch timeout) would otherwise hold every sequence, as a failing one would.
	ListStall time.Duration
	// ProbePeriod is how often a kind whose informer synced and then failed is read again, to tell
	// when it is back (0: 5 s).
	ProbePeriod time.Duration
	// InScope says whether wavegate acts on a namespace's objects. Objects of other namespaces are
	// kept as metadata only (what releasing a finalizer needs); when a namespace comes into scope,
	// Rescope re-lists. Nil: every namespace.
	InScope func(namespace string) bool

	rescope chan struct{}
	relabel chan struct{}

	// gen counts the changes of what the tracker can show: informers added, stopped or replaced, a
	// kind becoming unavailable or available again. A pass that read the members decides on them only
	// while it is unchanged (Changed).
	gen atomic.Uint64

	refreshing sync.Mutex
	mu         sync.RWMutex
	informers  map[informerKey]*tracked
	kinds      map[schema.GroupVersionResource]Kind
	// kept are the tracked kinds that the last Refresh kept although discovery did not return them
	// as trackable, because they are unavailable rather than gone (their API group's discovery
	// failed, or the manager lost list and watch access to them), with why.
	kept map[schema.GroupVersionResource]string
	// unwatchable are the resources the API server serves that the manager may not list and watch.
	unwatchable map[schema.GroupResource]bool
	// failedGroups are the API groups whose discovery failed at the last Refresh.
	failedGroups map[string]error
	// listed: a Refresh has completed since Start, or since the informers were dropped to re-list:
	// the informer set is whole. Until then the tracker holds no members, or some.
	listed bool
	// discovered: the first Refresh since Start has completed.
	discovered bool
	// stale: a namespace came into scope and the informers have not re-listed it yet (its objects
	// are cached as metadata only).
	stale bool
	// kindsChanging: a CRD came or went a moment ago, and the kinds it serves may not be tracked
	// yet (see KindsChanging).
	kindsChanging bool
}

// NeedLeaderElection: only the controllers (leader) need members.
func (t *Tracker) NeedLeaderElection() bool { return true }

// Start discovers kinds and runs informers until ctx ends.
func (t *Tracker) Start(ctx context.Context) error {
	// The first Refresh lists every namespace as it is now: an opt-in heard before needs no re-list
	// (one heard from now on may re-list once more).
	select {
	case <-t.signal(&t.rescope):
	default:
	}
	t.mu.Lock()
	t.informers = map[informerKey]*tracked{}
	t.kinds, t.kept, t.unwatchable, t.failedGroups = nil, nil, nil, nil
	t.listed, t.discovered, t.stale = false, false, false
	t.mu.Unlock()
	for t.Ready != nil && !t.Ready() {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := t.Refresh(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	t.discovered = true
	t.mu.Unlock()
	resync := t.Resync
	if resync == 0 {
		resync = 30 * time.Second
	}
	tick := time.NewTicker(resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := t.Refresh(ctx); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Refreshing tracked kinds")
			}
		case <-t.signal(&t.relabel):
			// The policies changed: a new group label gets its informers now, not at the next tick.
			if err := t.Refresh(ctx); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Tracking the policies' group labels")
			}
		case <-t.signal(&t.rescope):
			// A namespace came into scope: its objects are cached as metadata only; re-list them.
			// The tracker has not synced until the new informers have (a failed re-list is retried
			// at the next tick).
			if err := t.refresh(ctx, true); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Re-listing members after a namespace opted in")
			}
		}
	}
}

// signal returns one of the tracker's wake-up channels, made on first use (Rescope and Relabel
// may be called before Start).
func (t *Tracker) signal(c *chan struct{}) chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if *c == nil {
		*c = make(chan struct{}, 1)
	}
	return *c
}

// poke wakes the tracker without blocking: one pending wake-up is enough.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// KindsChanging says whether a CRD came or went a moment ago. While it does, the tracker has not
// synced: the custom resources of a CRD created by the same apply as the rest of an app (Helm
// installs its crds/ first, then the templates) are not tracked until discovery serves the new kind
// and its informer has listed, up to a few seconds after the CRD is Established. A group of such
// resources would be missing from every plan, and from the consistent read that confirms a
// release, so the groups after it would open early. Whoever watches CRDs sets it, and clears it
// once the kinds have been refreshed; it is bounded there, so that CRDs that keep changing never
// hold the sequences for good.
func (t *Tracker) KindsChanging(changing bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if changing && !t.kindsChanging {
		t.gen.Add(1) // a pass in flight decides on a view that may lack the new kind
	}
	t.kindsChanging = changing
}

// Relabel asks the tracker to track the current group labels (a policy changed). It does not
// block.
func (t *Tracker) Relabel() { poke(t.signal(&t.relabel)) }

// Rescope asks the tracker to re-list every member: a namespace came into scope. It does not block.
// The tracker has not synced from now until the re-list has.
func (t *Tracker) Rescope() {
	t.mu.Lock()
	t.stale = true
	t.mu.Unlock()
	t.gen.Add(1)
	poke(t.signal(&t.rescope))
}

// Refresh reconciles the informer set with discovery and the group labels: new CRDs and new
// policy group labels get informers, vanished ones are stopped; a label no policy names any more
// keeps its informers while objects grouped only by it carry wavegate's teardown finalizer (their
// sequences are woken for the hold to release them), and a later refresh stops them. A kind that is
// unavailable rather than gone keeps its informers and what they hold (see Unavailable). It waits
// for new informers to sync, or to fail to list.
func (t *Tracker) Refresh(ctx context.Context) error {
	return t.refresh(ctx, false)
}

// refresh is Refresh; relist first stops the informers of the policies' group labels, so that they
// all list again (those of a label being drained, and those of an unavailable kind, are kept).
func (t *Tracker) refresh(ctx context.Context, relist bool) error {
	t.refreshing.Lock()
	defer t.refreshing.Unlock()
	if relist {
		// Informers of a label no policy names any more are kept: they only show objects to the
		// hold for release, which their metadata is enough for, and a refresh would not restart them.
		// So are those of a kind that is unavailable: a new informer would not list it, and what the
		// old one holds would vanish from the members; one whose LIST hangs (stalled) would hold every
		// sequence for another ListStall at each relist (each namespace that opts in).
		labelKeys := t.GroupLabels()
		t.mu.Lock()
		for key, tr := range t.informers {
			if _, kept := t.kept[key.gvr]; !slices.Contains(labelKeys, key.label) || kept || tr.failing() != nil || tr.stalled() {
				continue
			}
			tr.cancel()
			delete(t.informers, key)
			t.gen.Add(1)
		}
		t.listed, t.stale = false, false
		t.mu.Unlock()
	}
	served, failedGroups, err := discover(t.Discovery, true, []string{"list", "watch"})
	if err != nil {
		return err
	}
	t.mu.RLock()
	before := t.kinds
	t.mu.RUnlock()
	kinds, kept, unwatchable := t.track(served, failedGroups, before)
	labelKeys := t.GroupLabels()
	want := map[informerKey]Kind{}
	for _, k := range kinds {
		for _, l := range labelKeys {
			want[informerKey{k.GVR, l}] = k
		}
	}
	t.mu.Lock()
	var started []*tracked
	var draining []string
	for key, tr := range t.informers {
		if _, ok := want[key]; ok {
			continue
		}
		if _, ok := kinds[key.gvr]; ok {
			// The kind is still tracked, so no policy names this label any more. Objects grouped only
			// by it that still carry wavegate's teardown finalizer would be shown to the hold by
			// nothing once this informer stops (nor to admission: the label's webhook entry goes
			// too), and a deleted one would stay Terminating forever. Keep it, and wake their
			// sequences, until the hold has released them (their labels no longer name a group); a
			// later refresh stops it.
			if seqs := stranded(tr, labelKeys); len(seqs) > 0 {
				draining = append(draining, seqs...)
				continue
			}
		}
		tr.cancel()
		delete(t.informers, key)
		t.gen.Add(1)
	}
	for key, k := range want {
		if _, ok := t.informers[key]; ok {
			continue
		}
		tr := t.newInformer(ctx, k, key.label, labelKeys)
		t.informers[key] = tr
		started = append(started, tr)
		t.gen.Add(1)
	}
	t.kinds, t.kept, t.unwatchable, t.failedGroups = kinds, kept, unwatchable, failedGroups
	t.mu.Unlock()
	if t.OnChange != nil {
		slices.Sort(draining)
		for _, seq := range slices.Compact(draining) {
			t.OnChange(seq)
		}
	}
	// Wait for the new informers to sync, or to fail: one that keeps failing would hold this
	// refresh, and the periodic one after it, forever.
	if err := wait.PollUntilContextCancel(ctx, syncPollPeriod, true, func(context.Context) (bool, error) {
		return !slices.ContainsFunc(started, (*tracked).pending), nil
	}); err != nil {
		return fmt.Errorf("member informers did not sync: %w", err)
	}
	t.mu.Lock()
	t.listed = true
	t.mu.Unlock()
	return nil
}

// syncPollPeriod is how often Refresh looks whether its new informers have synced (as
// cache.WaitForCacheSync does).
const syncPollPeriod = 100 * time.Millisecond

// track decides the kinds to track: every served kind the manager may list and watch, and every
// kind tracked before that is unavailable rather than gone: its API group's discovery failed, or
// the manager lost list and watch access to it (an aggregated ClusterRole removed with a chart).
// Those keep their informers, and what they hold, with why; stopping them would drop their objects
// from the members, and the teardown hold, counting fewer objects in later groups, could release
// an earlier group's finalizer while the later group's objects still exist. A kind discovery no
// longer serves (a CRD deleted), or serves at another preferred version, is gone. It also returns
// the served resources the manager may not list and watch.
func (t *Tracker) track(served []Kind, failedGroups map[string]error, before map[schema.GroupVersionResource]Kind) (
	map[schema.GroupVersionResource]Kind, map[schema.GroupVersionResource]string, map[schema.GroupResource]bool) {
	kinds := map[schema.GroupVersionResource]Kind{}
	servedGR := map[schema.GroupResource]bool{}
	unwatchable := map[schema.GroupResource]bool{}
	for _, k := range served {
		gr := k.GVR.GroupResource()
		servedGR[gr] = true
		if t.CanWatch == nil || t.CanWatch(gr.Group, gr.Resource) {
			kinds[k.GVR] = k
		} else {
			unwatchable[gr] = true
		}
	}
	kept := map[schema.GroupVersionResource]string{}
	for gvr, k := range before {
		if _, ok := kinds[gvr]; ok {
			continue
		}
		gr := gvr.GroupResource()
		switch err, failed := failedGroups[gr.Group]; {
		case unwatchable[gr]:
			kept[gvr] = accessLost(gr)
		case !servedGR[gr] && failed:
			kept[gvr] = groupUnavailable(gr.Group, err)
		default:
			continue
		}
		kinds[gvr] = k
	}
	return kinds, kept, unwatchable
}

// accessLost says why a resource the manager may not list and watch is unavailable, and the fix.
func accessLost(gr schema.GroupResource) string {
	return fmt.Sprintf("wavegate may not list and watch %s: grant list and watch on it with a ClusterRole labeled %s=true",
		gr, keys.AggregateToManagerLabel)
}

// groupUnavailable says why the resources of an API group whose discovery failed are unavailable.
func groupUnavailable(group string, err error) string {
	if group == "" {
		group = "core"
	}
	return fmt.Sprintf("the API group %s is unavailable (discovery failed: %v): check the APIService that serves it", group, err)
}

// listFailure says why a resource whose LIST or WATCH fails is unavailable, and the fix.
func listFailure(gvr schema.GroupVersionResource, err error) string {
	fix := "repair what serves it (its APIService, or its CRD's conversion webhook or schema)"
	if apierrors.IsForbidden(err) {
		fix = fmt.Sprintf("grant list and watch on %s with a ClusterRole labeled %s=true", gvr.GroupResource(), keys.AggregateToManagerLabel)
	}
	// The API server's own message, without the reflector's wrapping ("failed to list ...") nor a
	// request's URL (its resourceVersion and timeout change at every retry, and the message goes
	// into the Sequence's status and Events).
	msg := err.Error()
	var uerr *url.Error
	if st := apierrors.APIStatus(nil); errors.As(err, &st) && st.Status().Message != "" {
		msg = st.Status().Message
	} else if errors.As(err, &uerr) {
		msg = uerr.Err.Error()
	}
	return fmt.Sprintf("listing %s fails (%s): %s", ResourceString(gvr), msg, fix)
}

// stranded returns the sequences of the objects an informer holds that carry wavegate's teardown
// finalizer but none of labelKeys: no other informer shows them to the hold.
func stranded(tr *tracked, labelKeys []string) []string {
	var out []string
	for _, it := range tr.informer.GetStore().List() {
		u, ok := it.(*unstructured.Unstructured)
		if !ok || !slices.Contains(u.GetFinalizers(), keys.TeardownFinalizer) {
			continue
		}
		if !slices.ContainsFunc(labelKeys, func(l string) bool { _, ok := u.GetLabels()[l]; return ok }) {
			out = append(out, SequenceOf(u))
		}
	}
	return out
}

// Selector selects the objects whose group the label carries. Objects with wavegate.io/group are
// left to that label's selector, so each object is selected once.
func Selector(label string) string {
	req, _ := labels.NewRequirement(label, selection.Exists, nil)
	sel := labels.NewSelector().Add(*req)
	if label != keys.GroupLabel {
		not, _ := labels.NewRequirement(keys.GroupLabel, selection.DoesNotExist, nil)
		sel = sel.Add(*not)
	}
	return sel.String()
}

func (t *Tracker) newInformer(ctx context.Context, k Kind, label string, _ []string) *tracked {
	sel := Selector(label)
	tr := &tracked{kind: k, label: label, started: time.Now(), stall: t.listStall()}
	// As dynamicinformer's ListWatch, and it sees every LIST and WATCH fail: the reflector retries
	// some failures without ever reporting them to its watch error handler (a 429 "storage is
	// (re)initializing" from the watch cache of a CRD whose objects do not convert, say, for as long
	// as it lasts).
	res := t.Dynamic.Resource(k.GVR)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			list, err := res.List(ctx, o)
			t.failed(tr, err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			w, err := res.Watch(ctx, o)
			t.failed(tr, err)
			return w, err
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, t.Dynamic), &unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{ObjectDescription: k.GVR.String(),
			Indexers: cache.Indexers{SequenceIndex: sequenceIndex, cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}})
	tr.informer = inf
	_ = inf.SetTransform(func(obj any) (any, error) {
		obj, err := t.strip(obj)
		if u, ok := obj.(*unstructured.Unstructured); ok && err == nil {
			tr.arrivals.record(u, time.Now())
		}
		return obj, err
	})
	// The reflector reports here what ended a list and watch.
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		t.failed(tr, err)
	})
	notify := func(obj any) {
		if o, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = o.Obj
		}
		if u, ok := obj.(*unstructured.Unstructured); ok && t.OnChange != nil {
			t.OnChange(SequenceOf(u))
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: notify,
		UpdateFunc: func(old, obj any) {
			if SequenceOf(old.(*unstructured.Unstructured)) != SequenceOf(obj.(*unstructured.Unstructured)) {
				notify(old)
			}
			notify(obj)
		},
		DeleteFunc: func(obj any) {
			if o, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = o.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				tr.arrivals.forget(u.GetUID())
			}
			notify(obj)
		},
	})
	ictx, cancel := context.WithCancel(ctx)
	tr.ctx, tr.cancel = ictx, cancel
	go inf.RunWithContext(ictx)
	go func() {
		select {
		case <-inf.HasSyncedChecker().Done():
			tr.arrivals.markSynced(time.Now())
		case <-ictx.Done():
		}
	}()
	return tr
}

// failed records a LIST or WATCH error of an informer: one that fails (an aggregated API that is
// down, a CRD whose conversion webhook is down or whose schema is broken, access revoked) makes
// its kind unavailable until the informer moves on (listHealth). The sequences it holds objects of
// are woken: they are not planned from now on (Unavailable).
func (t *Tracker) failed(tr *tracked, err error) {
	if err == nil || benignWatchError(err) {
		return
	}
	tr.health.mu.Lock()
	wasFailing := tr.failingLocked() != nil
	tr.health.err, tr.health.rv, tr.health.synced = err, tr.informer.LastSyncResourceVersion(), tr.informer.HasSynced()
	tr.health.mu.Unlock()
	if wasFailing {
		return
	}
	t.gen.Add(1)
	t.wake(tr)
	if tr.ctx != nil {
		go t.probe(tr)
	}
}

// probePeriod is how often the kind of a synced informer that failed is read again (ProbePeriod).
func (t *Tracker) probePeriod() time.Duration {
	if t.ProbePeriod > 0 {
		return t.ProbePeriod
	}
	return 5 * time.Second
}

// probe reads, every probePeriod while a synced informer's error stands, one object of its kind
// straight from the API server: a read that succeeds ends the error (a watch broken once, the
// kind readable again), where the informer's own progress would end it only at its next event or
// bookmark, a minute later on a quiet kind, and every sequence that records the kind would wait
// that long. An informer that never synced stays unavailable until it syncs: a read says nothing of
// what it holds.
func (t *Tracker) probe(tr *tracked) {
	sel := Selector(tr.label)
	for {
		select {
		case <-tr.ctx.Done():
			return
		case <-time.After(t.probePeriod()):
		}
		err := tr.failing()
		if err == nil {
			return
		}
		if !tr.informer.HasSynced() {
			continue
		}
		// The informer's own read (every labeled object, in full: one that does not convert fails it).
		if _, lerr := t.Dynamic.Resource(tr.kind.GVR).List(tr.ctx, metav1.ListOptions{LabelSelector: sel}); lerr == nil {
			tr.health.mu.Lock()
			if tr.health.err == err {
				tr.health.err = nil
			}
			tr.health.mu.Unlock()
			t.gen.Add(1)
			t.wake(tr)
			return
		}
	}
}

// wake tells the sequences an informer holds objects of that its kind's availability changed.
func (t *Tracker) wake(tr *tracked) {
	if t.OnChange == nil {
		return
	}
	for _, seq := range slices.Sorted(maps.Keys(sequencesOf(tr.informer.GetStore().List()))) {
		t.OnChange(seq)
	}
}

// sequencesOf returns the sequences of tracked objects.
func sequencesOf(items []any) map[string]bool {
	out := map[string]bool{}
	for _, it := range items {
		if u, ok := it.(*unstructured.Unstructured); ok {
			out[SequenceOf(u)] = true
		}
	}
	return out
}

// strip drops what wavegate never reads, before the object enters the cache; of an object in a
// namespace out of scope it keeps only the metadata.
func (t *Tracker) strip(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if ns := u.GetNamespace(); ns != "" && t.InScope != nil && !t.InScope(ns) {
			stub := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind()}}
			stub.SetName(u.GetName())
			stub.SetNamespace(ns)
			stub.SetUID(u.GetUID())
			stub.SetResourceVersion(u.GetResourceVersion())
			stub.SetGeneration(u.GetGeneration())
			stub.SetLabels(u.GetLabels())
			stub.SetFinalizers(u.GetFinalizers())
			stub.SetOwnerReferences(u.GetOwnerReferences())
			stub.SetDeletionTimestamp(u.GetDeletionTimestamp())
			return stub, nil
		}
		u.SetManagedFields(nil)
		if a := u.GetAnnotations(); a != nil {
			if _, ok := a[keys.LastAppliedAnnotation]; ok {
				delete(a, keys.LastAppliedAnnotation)
				u.SetAnnotations(a)
			}
		}
	}
	return obj, nil
}

func sequenceIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	return []string{SequenceOf(u)}, nil
}

// SequenceOf returns the sequence an object belongs to: its sequence label, else its namespace.
func SequenceOf(o metav1.Object) string {
	if s, ok := o.GetLabels()[keys.SequenceLabel]; ok {
		return s
	}
	return o.GetNamespace()
}

// Discover returns the resources the API server serves (preferred versions, no subresources)
// that support every one of verbs and may hold group members (see Skipped). When the discovery of
// some API groups fails, it returns the others'.
func Discover(d discovery.DiscoveryInterface, verbs ...string) ([]Kind, error) {
	kinds, _, err := discover(d, true, verbs)
	return kinds, err
}

// DiscoverAll is Discover without leaving out the resources that never hold members; it also
// returns the API groups whose discovery failed, with the error: their resources may still exist.
func DiscoverAll(d discovery.DiscoveryInterface, verbs ...string) ([]Kind, map[string]error, error) {
	return discover(d, false, verbs)
}

// discover is Discover, which also returns the API groups whose discovery failed, with the error:
// their resources are missing from what it returns although they may still exist.
func discover(d discovery.DiscoveryInterface, skip bool, verbs []string) ([]Kind, map[string]error, error) {
	lists, err := d.ServerPreferredResources()
	var failed *discovery.ErrGroupDiscoveryFailed
	if err != nil && (len(lists) == 0 || !errors.As(err, &failed)) {
		// Nothing, or an error that does not say which groups are missing: no resource can be told
		// gone.
		return nil, nil, fmt.Errorf("discovering resources: %w", err)
	}
	var failedGroups map[string]error
	if failed != nil {
		failedGroups = map[string]error{}
		gvs := slices.SortedFunc(maps.Keys(failed.Groups), func(a, b schema.GroupVersion) int { return strings.Compare(a.String(), b.String()) })
		for _, gv := range gvs {
			failedGroups[gv.Group] = errors.Join(failedGroups[gv.Group], fmt.Errorf("%s: %w", gv, failed.Groups[gv]))
		}
	}
	var out []Kind
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || skip && skipped[schema.GroupResource{Group: gv.Group, Resource: r.Name}] ||
				slices.ContainsFunc(verbs, func(v string) bool { return !slices.Contains(r.Verbs, v) }) {
				continue
			}
			out = append(out, Kind{GVR: gv.WithResource(r.Name), GVK: gv.WithKind(r.Kind), Namespaced: r.Namespaced})
		}
	}
	return out, failedGroups, nil
}

// HasSynced reports whether the tracker holds every member it can: a Refresh has added the
// informers of every tracked kind and group label (since Start, or since a namespace came into
// scope) and each has synced, or failed to list (its kind is unavailable: see Unavailable). Until
// then Members may miss some, or all.
func (t *Tracker) HasSynced() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if !t.listed || t.stale || t.kindsChanging {
		return false
	}
	for _, tr := range t.informers {
		if tr.pending() {
			return false
		}
	}
	return true
}

// Unavailable returns the tracked kinds whose objects the tracker cannot see in full, with why:
// their LIST or WATCH fails (with the last error), the manager lost list and watch access to them,
// or their API group's discovery failed. Their informers keep what they last held (Members still
// shows it, possibly out of date) and keep retrying. A kind discovery no longer serves (a CRD
// deleted) is gone, not unavailable: its informers stop.
func (t *Tracker) Unavailable() map[schema.GroupVersionResource]string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.unavailable()
}

func (t *Tracker) unavailable() map[schema.GroupVersionResource]string {
	out := maps.Clone(t.kept)
	if out == nil {
		out = map[schema.GroupVersionResource]string{}
	}
	// Every pass asks, and nearly always nothing fails: only the informers that do are sorted, so that
	// the reason (with its error, which goes into Sequence statuses) is picked in a stable order.
	var bad []informerKey
	for key, tr := range t.informers {
		if tr.failing() != nil || tr.stalled() {
			bad = append(bad, key)
		}
	}
	slices.SortFunc(bad, func(a, b informerKey) int {
		return strings.Compare(a.gvr.String()+"\x00"+a.label, b.gvr.String()+"\x00"+b.label)
	})
	for _, key := range bad {
		if _, ok := out[key.gvr]; ok {
			continue
		}
		if err := t.informers[key].failing(); err != nil {
			out[key.gvr] = listFailure(key.gvr, err)
		} else if t.informers[key].stalled() {
			out[key.gvr] = fmt.Sprintf("listing %s has not completed in %s: repair what serves it (its APIService, or its CRD's conversion webhook)",
				ResourceString(key.gvr), t.informers[key].stall)
		}
	}
	return out
}

// WhyUnavailable returns, of resources, those whose objects the tracker cannot see in full, with
// why: the tracked kinds that are Unavailable, and also resources it does not track because the
// manager may not list and watch them, or because their API group's discovery failed (a manager
// that starts while an aggregated API is down knows none of its kinds). A resource the API server
// does not serve at all is gone: it is not returned.
func (t *Tracker) WhyUnavailable(resources []schema.GroupResource) map[schema.GroupResource]string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if len(resources) == 0 {
		return nil
	}
	tracked := map[schema.GroupResource]bool{}
	for gvr := range t.kinds {
		tracked[gvr.GroupResource()] = true
	}
	byResource := map[schema.GroupResource]string{}
	for gvr, why := range t.unavailable() {
		byResource[gvr.GroupResource()] = why
	}
	out := map[schema.GroupResource]string{}
	for _, gr := range resources {
		switch err, failed := t.failedGroups[gr.Group]; {
		case byResource[gr] != "":
			out[gr] = byResource[gr]
		case tracked[gr]:
		case t.unwatchable[gr]:
			out[gr] = accessLost(gr)
		case failed:
			out[gr] = groupUnavailable(gr.Group, err)
		}
	}
	return out
}

// Serves reports whether the last Refresh found a resource served by discovery: tracked, or served
// to a manager that may not list and watch it.
func (t *Tracker) Serves(gr schema.GroupResource) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.unwatchable[gr] {
		return true
	}
	for gvr := range t.kinds {
		if gvr.GroupResource() == gr {
			return true
		}
	}
	return false
}

// Discovered reports whether the tracker's first Refresh since Start has completed: from then on,
// Refresh may be called from elsewhere (a new CRD).
func (t *Tracker) Discovered() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.discovered
}

// Object is a tracked member with its kind.
type Object struct {
	Kind Kind
	*unstructured.Unstructured
	// Arrived is when the tracker's informer first received the object in its present state as
	// far as membership goes (see arrivals); zero when not known (the informer listed it so).
	Arrived time.Time
}

// Members returns the tracked objects of a sequence that are group members: not owned by a
// controller (their controller is the member) and not wavegate's wait Jobs.
func (t *Tracker) Members(sequence string) []Object {
	return t.objects(sequence, IsMember)
}

// NonMembers returns the tracked objects of a sequence that carry a group label but are not
// members: objects a controller made from a member's template (ReplicaSets, say).
func (t *Tracker) NonMembers(sequence string) []Object {
	return t.objects(sequence, func(o metav1.Object) bool { return !IsMember(o) })
}

func (t *Tracker) objects(sequence string, keep func(metav1.Object) bool) []Object {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []Object
	for _, tr := range t.informers {
		items, _ := tr.informer.GetIndexer().ByIndex(SequenceIndex, sequence)
		for _, it := range items {
			u := it.(*unstructured.Unstructured)
			if keep(u) {
				out = append(out, Object{Kind: tr.kind, Unstructured: u, Arrived: tr.arrivals.arrived(u)})
			}
		}
	}
	return out
}

// IsMember reports whether a labeled object is a group member in its own right: not made by a
// controller (one that owns it, or a StatefulSet for its volumeClaimTemplates: ClaimTemplate), not
// a wait Job.
func IsMember(o metav1.Object) bool {
	if metav1.GetControllerOfNoCopy(o) != nil || ClaimTemplate(o) {
		return false
	}
	_, waitJob := o.GetLabels()[keys.WaitJobLabel]
	return !waitJob
}

// ClaimTemplate reports whether an object is a claim that a StatefulSet's volumeClaimTemplates made
// (keys.ClaimTemplateAnnotation).
func ClaimTemplate(o metav1.Object) bool {
	_, ok := o.GetAnnotations()[keys.ClaimTemplateAnnotation]
	return ok
}

// SequencesIn returns the sequences that tracked objects of a namespace belong to: what to
// reconcile when the namespace opts in or out.
func (t *Tracker) SequencesIn(namespace string) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	set := map[string]bool{}
	for _, tr := range t.informers {
		items, _ := tr.informer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
		for _, it := range items {
			set[SequenceOf(it.(*unstructured.Unstructured))] = true
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Kinds returns the tracked kinds.
func (t *Tracker) Kinds() []Kind {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]Kind, 0, len(t.kinds))
	for _, k := range t.kinds {
		out = append(out, k)
	}
	return out
}

// FreshMembers lists the members of a sequence (the objects keep selects) straight from the API
// server with a consistent read, for decisions that must not act on a lagging cache. namespace
// limits namespaced kinds to one namespace ("" = all). It leaves out the kinds of skip: those the
// caller found Unavailable when it decided to plan the sequence (the sequence records none of them;
// their LIST would fail the read of every sequence). Any other kind is read, and one whose LIST
// fails fails the read: a kind that became unavailable since then may hold the sequence's members.
// keep selects the objects: IsMember for the members (teardown also reads objects that are not).
func (t *Tracker) FreshMembers(ctx context.Context, sequence, namespace string, skip map[schema.GroupVersionResource]string, keep func(metav1.Object) bool) ([]MetaObject, error) {
	t.mu.RLock()
	kinds := make([]Kind, 0, len(t.kinds))
	for gvr, k := range t.kinds {
		if _, ok := skip[gvr]; !ok {
			kinds = append(kinds, k)
		}
	}
	t.mu.RUnlock()
	return ListMembers(ctx, t.Metadata, kinds, t.GroupLabels(), sequence, namespace, keep)
}

// Generation is where the tracker's view stands: it moves when informers are added, stopped or
// replaced, and when a kind becomes unavailable or available again. A pass that planned on the
// members writes what it decided only if the generation has not moved since it read them (a
// re-list may have left it a partial view).
func (t *Tracker) Generation() uint64 { return t.gen.Load() }

// ListMembers lists the members of a sequence (the objects keep selects) among objects of kinds
// that carry one of labelKeys, straight from the API server (a consistent read). namespace limits
// the read to namespaced kinds in that namespace ("" = every kind, everywhere). keep selects the
// objects (IsMember: the members).
func ListMembers(ctx context.Context, md metadata.Interface, kinds []Kind, labelKeys []string, sequence, namespace string, keep func(metav1.Object) bool) ([]MetaObject, error) {
	// One LIST per kind and label, a few at a time: the consistent read is on the critical path of
	// every release, and dozens of kinds read one after the other would add up.
	var mu sync.Mutex
	var out []MetaObject
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(freshListConcurrency)
	for _, k := range kinds {
		if namespace != "" && !k.Namespaced {
			continue
		}
		for _, l := range labelKeys {
			ns := namespace
			eg.Go(func() error {
				list, err := md.Resource(k.GVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: Selector(l)})
				if err != nil {
					return fmt.Errorf("listing %s: %w", k.GVR, err)
				}
				mu.Lock()
				defer mu.Unlock()
				for i := range list.Items {
					o := &list.Items[i]
					if SequenceOf(o) == sequence && keep(o) {
						out = append(out, MetaObject{Kind: k, PartialObjectMetadata: o})
					}
				}
				return nil
			})
		}
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// freshListConcurrency bounds the LISTs of one consistent read in flight. The API server serves a
// consistent LIST from its watch cache once the cache has caught up with etcd, and for a kind
// nothing changed lately that takes its next watch-progress round (every 100 ms): the LISTs must
// wait out that round together, not in batches (8 at a time, the 20-odd kinds of a namespace took
// 190-450 ms on the local cluster; 64 at a time, 120-160 ms).
const freshListConcurrency = 64

// MetaObject is a labeled object's metadata (a member's, most often) with its kind.
type MetaObject struct {
	Kind Kind
	*metav1.PartialObjectMetadata
}
