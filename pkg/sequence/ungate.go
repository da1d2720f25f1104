package sequence

// Ungating: removing the scheduling gate from the pods of open groups, and releasing what
// wavegate holds outside opted-in namespaces.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/patch"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/resolve"
	"wavegate.io/wavegate/pkg/teardown"
)

// TemplateToken identifies the pod template a pod was made from: its controller's UID and the
// template hash the controller stamps. Bare pods have none.
func TemplateToken(o metav1.Object) string {
	c := metav1.GetControllerOfNoCopy(o)
	if c == nil {
		return ""
	}
	l := o.GetLabels()
	for _, k := range keys.TemplateHashLabelsOf(c.Kind) {
		if v, ok := l[k]; ok {
			return string(c.UID) + "/" + v
		}
	}
	return string(c.UID)
}

// ungated is what ungate decided: the pods still gated per group, the templates it releases, and
// the pods to release (release removes their gates).
type ungated struct {
	// seq is the sequence; known are the pods the pass has decided on (gated or not).
	seq      string
	known    map[types.UID]bool
	gated    map[string]int32
	released map[string][]string
	// running are, per group, the templates of the cached pods that have no gate; templates, those
	// of all its cached pods (gated or not, being deleted or not).
	running, templates map[string][]string
	// pods are the cached pods to release.
	pods []*corev1.Pod
	// podsOnly are the groups of still gated pods that the cache's plan does not have (no tracked
	// member), and where they stand: the status counts their gated pods too.
	podsOnly map[string]podGroup
	// requires are the open groups of the plan whose pods still wait, each for a group that the
	// pods' own namespace's policy requires before them and that has no members yet (of the groups
	// its pods wait for, the one whose name sorts first): the status names it.
	requires map[string]string
	// joins tells the namespaces whose pods are the sequence's.
	joins func(namespace string) bool
}

func (u *ungated) releasing(group, template string) {
	addTemplate(u.released, group, template)
}

// addTemplate adds a template (not "", a bare pod's) to a group's, once.
func addTemplate(to map[string][]string, group, template string) {
	if template != "" && !slices.Contains(to[group], template) {
		to[group] = append(to[group], template)
	}
}

// straggler reports whether a gated pod of group, made from template, that the pass's cache did
// not show when it decided goes with the pods the pass releases: its template is one the pass
// clears, in the same group. Admission lets every pod of that template created from now on start
// without the gate; a pod created while the pass read and decided was gated only because admission
// had not heard yet. A bare pod (no template) and a pod of a template the read did not release
// wait for a read of their own.
func (u *ungated) straggler(group, template string) bool {
	return template != "" && slices.Contains(u.released[group], template)
}

// freshView plans a sequence on a consistent read of its members from the API server, with its
// wait Jobs from the cache: the second opinion of the opener. The pods a pass releases on it are
// the cache's, which existed before the read began, so no pod is released on a view of its earlier
// groups older than the pod itself; those the cache shows later go with them only as stragglers of
// a template the pass releases (ungated.straggler).
type freshView struct {
	r     *Reconciler
	seq   string
	idx   *policy.Index
	scope *scope
	// members reads the sequence's members (Tracker.FreshMembers when nil; tests replace it).
	members func(ctx context.Context, seq, namespace string) ([]members.MetaObject, error)
	// unavailable are the kinds the tracker could not see when the pass began: the read leaves them
	// out, and fails on any other kind it cannot list.
	unavailable map[schema.GroupVersionResource]string
	// positions remembers podGroup per pod for the reconcile.
	positions map[types.UID]podGroup
	// refused are the sequence's refused wait Jobs (see planRefused), as the cache's plan had them.
	refused map[string]time.Time
}

// podGroup tells where a gated pod's group stands when no tracked member has it (a bare pod, a
// pod of a controller wavegate does not track): at the group order of the pod's labels, resolved
// as any object's, with the groups its policy requires before it. Labels that no longer resolve
// (a policy changed since) fall back on the group order admission resolved and stamped on the pod
// when it gated it, and failing that the pod comes after every group: it never goes early, and
// goes once every group of its sequence is released. Pure and from memory: no API call per pod.
func (f *freshView) podGroup(ctx context.Context, p *corev1.Pod) podGroup {
	if pg, ok := f.positions[p.UID]; ok {
		return pg
	}
	var nsLabels map[string]string
	if f.scope != nil {
		nsLabels = f.scope.Labels(ctx, p.Namespace)
	}
	pg := podGroup{order: math.MaxInt32}
	if res, errs := resolve.Resolve(resolve.Object{Namespace: p.Namespace, NamespaceLabels: nsLabels, Labels: p.Labels}, f.idx); res != nil && len(errs) == 0 {
		pg.order = res.GroupOrder
		if res.Policy != nil {
			// As Plan does for a group with members: the policy's required groups before it.
			for _, g := range f.idx.PolicyGroups(res.Policy.Policy) {
				if g.Required && g.Order < res.GroupOrder {
					pg.requires = append(pg.requires, g.Name)
				}
			}
		}
	} else if n, err := strconv.ParseInt(p.Annotations[keys.ResolvedGroupOrderAnnotation], 10, 32); err == nil {
		pg.order = int32(n)
	}
	if f.positions == nil {
		f.positions = map[types.UID]podGroup{}
	}
	f.positions[p.UID] = pg
	return pg
}

// joins reports whether a namespace's pods may be the sequence's (policy.Index.MayJoin).
func (f *freshView) joins(ctx context.Context) func(namespace string) bool {
	return func(ns string) bool {
		var labels map[string]string
		if f.scope != nil {
			labels = f.scope.Labels(ctx, ns)
		}
		return f.idx.MayJoin(f.seq, ns, labels)
	}
}

func (f *freshView) plan(ctx context.Context) (openness, error) {
	// A sequence that no policy shares has members only in its own namespace: the read stays there
	// (one LIST per namespaced kind in one namespace, instead of every labeled object everywhere).
	ns := f.idx.MemberNamespace(f.seq)
	read := f.members
	if read == nil {
		read = func(ctx context.Context, seq, namespace string) ([]members.MetaObject, error) {
			return f.r.Tracker.FreshMembers(ctx, seq, namespace, f.unavailable, members.IsMember)
		}
	}
	objs, err := read(ctx, f.seq, ns)
	if err != nil {
		return openness{}, err
	}
	jobs, err := f.r.waitJobs(ctx, f.seq)
	if err != nil {
		return openness{}, err
	}
	ms := make([]Member, 0, len(objs))
	for _, o := range objs {
		// The second opinion does not trust the namespace cache either: a namespace it shows out of
		// scope may have opted in a moment ago, and its members come before the group.
		if f.scope.confirmedOut(ctx, o.Kind.NamespaceOf(o)) {
			continue
		}
		if m, ok := toMember(o.Kind, o, f.idx, f.scope.Labels(ctx, o.GetNamespace())); ok {
			ms = append(ms, m)
		}
	}
	succeeded, err := f.r.succeededWaiters(ctx, f.seq, jobs)
	if err != nil {
		return openness{}, err
	}
	return openGroups(planRefused(f.seq, ms, f.idx, jobStates(jobs, succeeded), f.r.Namespace, f.refused, f.r.now())), nil
}

// ungate decides which gated pods of the sequence to release, through the opener: a lagging cache
// (an earlier group's objects created a moment before the pods) never releases a pod early. A pod
// whose group has no tracked member goes as a pod of an empty group at its order would (openness).
// On an error it returns what it decided so far.
func (r *Reconciler) ungate(ctx context.Context, pods []*corev1.Pod, gate *opener, fresh *freshView) (*ungated, error) {
	out := &ungated{seq: fresh.seq, known: make(map[types.UID]bool, len(pods)), gated: map[string]int32{}, released: map[string][]string{}, running: map[string][]string{},
		templates: map[string][]string{}, podsOnly: map[string]podGroup{}, requires: map[string]string{}, joins: fresh.joins(ctx)}
	stillGated := func(group string, p *corev1.Pod) {
		out.gated[group]++
		if _, ok := out.podsOnly[group]; !ok && !gate.Planned(group) {
			out.podsOnly[group] = fresh.podGroup(ctx, p)
		}
		if req := gate.Requires(group, func() podGroup { return fresh.podGroup(ctx, p) }); req != "" && (out.requires[group] == "" || req < out.requires[group]) {
			out.requires[group] = req
		}
	}
	var candidates []*corev1.Pod
	now := r.now()
	r.recent.expire(now)
	for _, p := range pods {
		out.known[p.UID] = true
		if t := TemplateToken(p); t != "" {
			addTemplate(out.templates, p.Labels[keys.GroupLabel], t)
			if !HasGate(p) {
				addTemplate(out.running, p.Labels[keys.GroupLabel], t)
			}
		}
		if !HasGate(p) || p.DeletionTimestamp != nil {
			r.recent.forget(p.UID)
			continue
		}
		if r.recent.released(p.UID, now) {
			continue
		}
		group := p.Labels[keys.GroupLabel]
		if !gate.CachedOpenPods(group, func() podGroup { return fresh.podGroup(ctx, p) }) {
			stillGated(group, p)
			continue
		}
		candidates = append(candidates, p)
	}
	if len(candidates) == 0 {
		return out, nil
	}
	for _, p := range candidates {
		group := p.Labels[keys.GroupLabel]
		open, err := gate.OpenPods(group, func() podGroup { return fresh.podGroup(ctx, p) })
		if err != nil {
			return out, err
		}
		if !open {
			stillGated(group, p)
			continue
		}
		out.pods = append(out.pods, p)
		out.releasing(group, TemplateToken(p))
	}
	// The pods the cache has seen since, of the templates released here, go too (stragglers).
	more, err := r.stragglers(ctx, out)
	out.pods = append(out.pods, more...)
	return out, err
}

// stragglers returns the cached gated pods that the pass has not decided on and that go with the
// pods it releases (ungated.straggler): a ReplicaSet still creating a hundred pods leaves dozens
// that the pass's cache did not show when it decided, and each would otherwise wait for the
// release to end, then for another pass and another consistent read (675-850 ms after the
// decision, on the local cluster).
func (r *Reconciler) stragglers(ctx context.Context, u *ungated) ([]*corev1.Pod, error) {
	if len(u.released) == 0 {
		return nil, nil
	}
	pods, err := r.sequencePods(ctx, u.seq, u.joins)
	if err != nil {
		return nil, err
	}
	now := r.now()
	var out []*corev1.Pod
	for _, p := range pods {
		if u.known[p.UID] || !HasGate(p) || p.DeletionTimestamp != nil || r.recent.released(p.UID, now) {
			continue
		}
		if u.straggler(p.Labels[keys.GroupLabel], TemplateToken(p)) {
			u.known[p.UID] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// release removes the gates ungate decided to remove, several at a time, and those of the
// stragglers the cache sees meanwhile: once the last of the others is under way (of a hundred,
// the first third is done by then), and once they are all done.
func (r *Reconciler) release(ctx context.Context, u *ungated) error {
	var eg, last errgroup.Group
	eg.SetLimit(ungateParallelism)
	r.goRemoveGates(ctx, &eg, u.pods)
	more, err := r.stragglers(ctx, u)
	r.goRemoveGates(ctx, &eg, more)
	err = errors.Join(err, eg.Wait())
	more, lerr := r.stragglers(ctx, u)
	last.SetLimit(ungateParallelism)
	r.goRemoveGates(ctx, &last, more)
	return errors.Join(err, lerr, last.Wait())
}

// goRemoveGates removes, in eg, the gates of cached pods; it returns once the last one is under way.
func (r *Reconciler) goRemoveGates(ctx context.Context, eg *errgroup.Group, pods []*corev1.Pod) {
	for _, p := range pods {
		eg.Go(func() error { return r.removeGate(ctx, p) })
	}
}

// ungateParallelism bounds the gate removals in flight: a group of a hundred pods is released in
// two rounds, within the manager's client burst (--kube-api-burst 200). On the local cluster 64
// in flight took 300-450 ms for 100 pods where 16 took 600-900 ms.
const ungateParallelism = 64

// releaseOutside releases what wavegate holds in namespaces that are not (or no longer) opted in:
// the teardown finalizers of members and the scheduling gates of pods. (The gated pods of
// namespaces that may not join the sequence are StrangerReconciler's.)
func (r *Reconciler) releaseOutside(ctx context.Context, pods []*corev1.Pod, outside []members.Object, sc *scope) error {
	// Each on the API server's word, not only the cache's: a namespace created or labeled a moment
	// ago may not be in the cache yet (see scope).
	for _, o := range outside {
		if teardown.HasFinalizer(o) && sc.confirmedOut(ctx, o.GetNamespace()) {
			if err := r.holder(nil).Release(ctx, o, fmt.Sprintf("namespace %s is not opted in (%s)", o.GetNamespace(), keys.EnabledLabel)); err != nil {
				return err
			}
		}
	}
	for _, p := range pods {
		if HasGate(p) && p.DeletionTimestamp == nil && sc.confirmedOut(ctx, p.Namespace) {
			if err := r.removeGate(ctx, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// sequencePods lists a sequence's cached pods once per reconcile, without copying them: they are
// only read (a reconcile per pod event, each copying a hundred pods several times, was a third of
// the manager's CPU while a ReplicaSet created a hundred gated pods).
//
// Any pod may name any sequence in its labels (pods are never denied), but only those of the
// namespaces that may join it (joins) are its pods: a tenant's pod that names another namespace's
// sequence gates, counts, clears and costs nothing there (StrangerReconciler releases it).
func (r *Reconciler) sequencePods(ctx context.Context, seq string, joins func(namespace string) bool) ([]*corev1.Pod, error) {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.MatchingFields{PodSequenceIndex: seq}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		if p := &list.Items[i]; joins(p.Namespace) {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// HasGate reports whether a pod carries wavegate's scheduling gate.
func HasGate(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == keys.SchedulingGate {
			return true
		}
	}
	return false
}

// removeGate removes wavegate's gate with a JSON patch that first tests the pod is the one the pass
// decided on (its UID: a pod deleted and created again under its name, a StatefulSet's, was gated
// on what holds now, which the pass did not see) and that the gate is where it was seen, so a
// concurrent change of the gates makes the patch fail instead of removing another gate. When the
// gate is not where the cache saw it (a pass whose patches the cache has not seen yet removed it,
// or the gates changed), the pod is read and, if it is the same pod and still gated, patched once
// more.
func (r *Reconciler) removeGate(ctx context.Context, p *corev1.Pod) error {
	res, err := removeGateOrRead(ctx, r.Client, r.APIReader, p)
	if err != nil {
		return fmt.Errorf("removing the scheduling gate of %s: %w", klog.KObj(p), err)
	}
	if res != podReplaced {
		r.recent.add(p.UID, r.now())
	}
	return nil
}

// gateRemoval is what removeGateOrRead found.
type gateRemoval int

const (
	// gateRemoved: this call removed the gate.
	gateRemoved gateRemoval = iota
	// gateNotThere: the pod no longer has it (removed before), or is being deleted.
	gateNotThere
	// podGone: the pod is gone.
	podGone
	// podReplaced: another pod has its name now (a pass of its own decides on it).
	podReplaced
)

// removeGateOrRead removes wavegate's gate from a pod as p shows it; when the API server refuses
// the patch's test (the cache's pod is not the current one: its gates moved, or another pass
// removed the gate), it reads the pod from live and goes by what that shows.
func removeGateOrRead(ctx context.Context, c client.Client, live client.Reader, p *corev1.Pod) (gateRemoval, error) {
	res, err := removeGateOf(ctx, c, p)
	if apierrors.IsInvalid(err) && live != nil {
		cur := &corev1.Pod{}
		if err := live.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
			return podGone, client.IgnoreNotFound(err)
		}
		if cur.UID != p.UID {
			return podReplaced, nil
		}
		if cur.DeletionTimestamp != nil {
			return gateNotThere, nil
		}
		res, err = removeGateOf(ctx, c, cur)
	}
	return res, err
}

// removeGateOf removes wavegate's scheduling gate from a pod, if it still has it where p shows it
// (the patch tests the pod's UID and the gate: Invalid otherwise).
func removeGateOf(ctx context.Context, c client.Client, p *corev1.Pod) (gateRemoval, error) {
	for i, g := range p.Spec.SchedulingGates {
		if g.Name != keys.SchedulingGate {
			continue
		}
		// The patch only removes: it sets no field, so the pod gets no managedFields entry of
		// wavegate's. Each entry is converted on every later write of the pod (its binding, its
		// kubelet's status updates); a released-at annotation written here cost the hundred-pod
		// release about 55 ms on the local cluster (docs/benchmarks.md).
		ops := patch.TestAndRemoveFrom(p.UID, "/spec/schedulingGates", i, map[string]string{"name": keys.SchedulingGate})
		// The pod may be the cache's own (sequencePods does not copy): the response goes
		// elsewhere, and only its metadata is asked for.
		target := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
		target.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
		switch gone, err := patchJSON(ctx, c, target, ops...); {
		case err != nil:
			return 0, err
		case gone:
			return podGone, nil
		}
		return gateRemoved, nil
	}
	return gateNotThere, nil
}

// recentReleases are the pods whose gate this manager removed and whose update its cache may not
// have seen yet: the next reconcile, which can start a few milliseconds later, counts them as
// released instead of patching them again (a patch that would fail its test). Like a controller's
// expectations it is only an optimization: a restarted manager lists its cache afresh.
type recentReleases struct {
	mu   sync.Mutex
	pods map[types.UID]time.Time
}

// recentTTL bounds how long a release is remembered, should the cache never show the pod again.
const recentTTL = 30 * time.Second

func (r *recentReleases) add(uid types.UID, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pods == nil {
		r.pods = map[types.UID]time.Time{}
	}
	r.pods[uid] = now
}

// released reports whether a pod that the cache shows gated was released a moment ago.
func (r *recentReleases) released(uid types.UID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.pods[uid]
	return ok && now.Sub(t) < recentTTL
}

// forget drops a pod that the cache shows ungated.
func (r *recentReleases) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pods, uid)
}

// expire drops the releases older than recentTTL (pods deleted before the cache showed them
// ungated).
func (r *recentReleases) expire(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for u, t := range r.pods {
		if now.Sub(t) >= recentTTL {
			delete(r.pods, u)
		}
	}
}
