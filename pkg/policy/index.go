// Package policy compiles WavePolicy objects into an immutable index that admission and the
// controllers consult without calling the API server.
package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/readiness"
)

// DefaultTimeout is a group's readiness timeout when no policy sets one.
const DefaultTimeout = 10 * time.Minute

// Group is one group as the policies define it.
type Group struct {
	Name      string
	Order     int32
	Required  bool
	Timeout   time.Duration
	OnTimeout wavev1.OnTimeout
	Teardown  wavev1.Teardown
	// ForceRemoveFinalizers allows the last-resort removal of stuck cleanup finalizers.
	ForceRemoveFinalizers bool
	// Policy is the WavePolicy that defines the group.
	Policy string
}

// Index is the compiled, read-only view of every WavePolicy. The zero value (and nil) is an index
// without policies: groups take their order from labels.
//
// Policies may select namespaces. The index returned by Compile answers for objects whose
// namespace's labels are not at hand (the policies without a selector) and knows every group label;
// For returns the view of the policies that apply to one namespace (or, for a cluster-scoped
// object, to the sequence it joins), compiled once and cached.
type Index struct {
	groupLabels  []string
	groups       map[string]Group
	conflicts    map[string]string
	requireKnown []string

	// root is the index Compile returned; views point to it.
	root *Index
	// The rest is set on the root only.
	policies  []scopedPolicy
	scoped    bool // some policy has a namespace selector
	sequences map[string][]declaration
	allLabels []string
	// allCheckers and allReadiness hold every policy's readiness, by policy name.
	allCheckers  map[string]*readiness.Checker
	allReadiness map[string]wavev1.Readiness
	views        sync.Map // view key -> *Index
}

type scopedPolicy struct {
	policy   *wavev1.WavePolicy
	selector labels.Selector // nil: every namespace
}

type declaration struct {
	policy        string
	selector      labels.Selector // nil: no other namespace
	clusterScoped bool
}

// Compile builds an Index. Policies are read in name order so that the result does not depend on
// list order. A group that two policies applying to the same namespace define with different orders
// is recorded as a conflict: members of that group there are denied until the policies agree.
func Compile(policies []wavev1.WavePolicy) *Index {
	sorted := slices.Clone(policies)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	root := &Index{sequences: map[string][]declaration{}, allCheckers: map[string]*readiness.Checker{}, allReadiness: map[string]wavev1.Readiness{}}
	var unscoped []*wavev1.WavePolicy
	for i := range sorted {
		p := &sorted[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		sp := scopedPolicy{policy: p}
		if p.Spec.NamespaceSelector != nil {
			sp.selector = selector(p.Spec.NamespaceSelector)
			root.scoped = true
		} else {
			unscoped = append(unscoped, p)
		}
		root.policies = append(root.policies, sp)
		root.allReadiness[p.Name] = p.Spec.Readiness
		if c, err := readiness.NewChecker(p.Spec.Readiness); err == nil {
			root.allCheckers[p.Name] = c
		}
		if l := p.Spec.GroupLabel; l != "" && l != keys.GroupLabel && InvalidGroupLabel(l) == "" && !slices.Contains(root.allLabels, l) {
			root.allLabels = append(root.allLabels, l)
		}
		for _, sq := range p.Spec.Sequences {
			d := declaration{policy: p.Name, clusterScoped: sq.ClusterScoped}
			if sq.NamespaceSelector != nil {
				d.selector = selector(sq.NamespaceSelector)
			}
			root.sequences[sq.Name] = append(root.sequences[sq.Name], d)
		}
	}
	root.compile(unscoped)
	root.groupLabels = root.allLabels
	root.root = root
	return root
}

// InvalidGroupLabel says why a policy's groupLabel is not a label key, or "". The CRD refuses such
// a key; one stored before it did is left out of the index (a label selector on it would not
// parse: the member tracker, admission's webhook entries and uninstall select by it), and the
// policy's status says so.
func InvalidGroupLabel(l string) string {
	if msgs := validation.IsQualifiedName(l); len(msgs) > 0 {
		return strings.Join(msgs, "; ")
	}
	return ""
}

// selector converts a label selector; one that does not parse selects nothing (the policy's status
// says why).
func selector(ls *metav1.LabelSelector) labels.Selector {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return labels.Nothing()
	}
	return sel
}

// compile fills the view's groups, labels, readiness and conflicts from policies, in name order.
func (idx *Index) compile(policies []*wavev1.WavePolicy) {
	idx.groups, idx.conflicts = map[string]Group{}, map[string]string{}
	for _, p := range policies {
		if l := p.Spec.GroupLabel; l != "" && l != keys.GroupLabel && InvalidGroupLabel(l) == "" && !slices.Contains(idx.groupLabels, l) {
			idx.groupLabels = append(idx.groupLabels, l)
		}
		if p.Spec.RequireKnownGroups {
			idx.requireKnown = append(idx.requireKnown, p.Name)
		}
		for _, g := range p.Spec.Groups {
			got := groupOf(p, g)
			if prev, ok := idx.groups[g.Name]; ok && prev.Order != got.Order {
				idx.conflicts[g.Name] = fmt.Sprintf("WavePolicies %q and %q define group %q with orders %d and %d",
					prev.Policy, got.Policy, g.Name, prev.Order, got.Order)
				continue
			}
			if _, ok := idx.groups[g.Name]; !ok {
				idx.groups[g.Name] = got
			}
		}
	}
}

// For returns the view of the policies that apply to an object: for a namespaced object those
// that select its namespace (nsLabels are the namespace's labels), for a cluster-scoped one
// (namespace "") those without a selector and those that declare the sequence it joins.
func (i *Index) For(namespace string, nsLabels map[string]string, sequence string) *Index {
	if i == nil {
		return nil
	}
	root := i.root
	if root == nil {
		return i
	}
	if !root.scoped && (namespace != "" || len(root.sequences[sequence]) == 0) {
		return root
	}
	var key string
	if namespace != "" {
		key = "ns\x00" + labels.Set(nsLabels).String()
	} else {
		key = "cluster\x00" + sequence
	}
	if v, ok := root.views.Load(key); ok {
		return v.(*Index)
	}
	var apply []*wavev1.WavePolicy
	for _, sp := range root.policies {
		switch {
		case sp.selector == nil:
		case namespace != "" && sp.selector.Matches(labels.Set(nsLabels)):
		case namespace == "" && slices.ContainsFunc(root.sequences[sequence], func(d declaration) bool { return d.policy == sp.policy.Name }):
		default:
			continue
		}
		apply = append(apply, sp.policy)
	}
	v := &Index{root: root}
	v.compile(apply)
	actual, _ := root.views.LoadOrStore(key, v)
	return actual.(*Index)
}

// NeedsNamespaceLabels reports whether resolution depends on namespace labels: some policy or
// shared sequence selects namespaces.
func (i *Index) NeedsNamespaceLabels() bool {
	if i == nil || i.root == nil {
		return false
	}
	if i.root.scoped {
		return true
	}
	for _, ds := range i.root.sequences {
		for _, d := range ds {
			if d.selector != nil {
				return true
			}
		}
	}
	return false
}

// OwnSequence reports whether a sequence is a namespace's own: the namespace's name or
// <namespace>.<name>. Its objects may join it whatever the policies say.
func OwnSequence(sequence, namespace string) bool {
	return namespace != "" && (sequence == namespace || strings.HasPrefix(sequence, namespace+"."))
}

// MayJoin reports whether an object may join a sequence: a namespaced object its own namespace's
// sequences (the namespace's name or <namespace>.<name>) and the shared sequences whose declaration
// selects its namespace; a cluster-scoped object (namespace "") only shared sequences declared with
// clusterScoped.
func (i *Index) MayJoin(sequence, namespace string, nsLabels map[string]string) bool {
	if OwnSequence(sequence, namespace) {
		return true
	}
	if i == nil || i.root == nil {
		return false
	}
	for _, d := range i.root.sequences[sequence] {
		if namespace == "" && d.clusterScoped || namespace != "" && d.selector != nil && d.selector.Matches(labels.Set(nsLabels)) {
			return true
		}
	}
	return false
}

// Shared reports whether a WavePolicy declares the sequence as shared: only then may objects of
// other namespaces than its own (the part of its name before the first dot), or cluster-scoped
// objects, be its members.
func (i *Index) Shared(sequence string) bool {
	return i != nil && i.root != nil && len(i.root.sequences[sequence]) > 0
}

// ClusterScoped reports whether a WavePolicy declares the sequence with clusterScoped: the
// platform's consent that the sequence reaches cluster-scoped objects. Only then may a member's
// declared cleanup (keys.CleanupAnnotation) name a cluster-scoped kind, whose objects wavegate
// deletes everywhere.
func (i *Index) ClusterScoped(sequence string) bool {
	if i == nil || i.root == nil {
		return false
	}
	for _, d := range i.root.sequences[sequence] {
		if d.clusterScoped {
			return true
		}
	}
	return false
}

// MemberNamespace returns the only namespace the members of a sequence can be in (the part of its
// name before the first dot), or "" for a shared sequence, whose members can be anywhere: a
// consistent read of its members stays in that namespace.
func (i *Index) MemberNamespace(sequence string) string {
	if i.Shared(sequence) {
		return ""
	}
	ns, _, _ := strings.Cut(sequence, ".")
	return ns
}

// AppliesTo reports whether the named policy applies to a namespace with these labels.
func (i *Index) AppliesTo(policyName string, nsLabels map[string]string) bool {
	if i == nil || i.root == nil {
		return false
	}
	for _, sp := range i.root.policies {
		if sp.policy.Name == policyName {
			return sp.selector == nil || sp.selector.Matches(labels.Set(nsLabels))
		}
	}
	return false
}

// PolicyGroups returns the groups the named policy declares, whether or not it selects
// namespaces, in order.
func (i *Index) PolicyGroups(policyName string) []Group {
	if i == nil || i.root == nil {
		return nil
	}
	var out []Group
	for _, sp := range i.root.policies {
		if sp.policy.Name != policyName {
			continue
		}
		for _, g := range sp.policy.Spec.Groups {
			out = append(out, groupOf(sp.policy, g))
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Order < out[b].Order })
	return out
}

func groupOf(p *wavev1.WavePolicy, g wavev1.GroupSpec) Group {
	out := Group{
		Name: g.Name, Order: g.Order, Required: g.Required, Policy: p.Name,
		Timeout: DefaultTimeout, OnTimeout: wavev1.OnTimeoutBlock, Teardown: wavev1.TeardownOrdered,
	}
	d := p.Spec.Defaults
	// A timeout under a second is refused by the CRD; one stored before it was would give the
	// group's wait Job a deadline of a second: the default applies instead.
	if d.Timeout != nil && d.Timeout.Duration >= time.Second {
		out.Timeout = d.Timeout.Duration
	}
	if d.OnTimeout != "" {
		out.OnTimeout = d.OnTimeout
	}
	if d.Teardown != "" {
		out.Teardown = d.Teardown
	}
	out.ForceRemoveFinalizers = d.ForceRemoveFinalizers
	if g.ForceRemoveFinalizers != nil {
		out.ForceRemoveFinalizers = *g.ForceRemoveFinalizers
	}
	if g.Timeout != nil && g.Timeout.Duration >= time.Second {
		out.Timeout = g.Timeout.Duration
	}
	if g.OnTimeout != "" {
		out.OnTimeout = g.OnTimeout
	}
	if g.Teardown != "" {
		out.Teardown = g.Teardown
	}
	return out
}

// GroupLabels returns the label keys that carry an object's group, wavegate.io/group first: on
// the index Compile returned, those of every policy (what informers and webhook entries select);
// on a view, those of its policies.
func (i *Index) GroupLabels() []string {
	if i == nil {
		return []string{keys.GroupLabel}
	}
	return append([]string{keys.GroupLabel}, i.groupLabels...)
}

// Group returns the policy definition of a group.
func (i *Index) Group(name string) (Group, bool) {
	if i == nil {
		return Group{}, false
	}
	g, ok := i.groups[name]
	return g, ok
}

// Conflict returns why the policies disagree about a group, or "".
func (i *Index) Conflict(name string) string {
	if i == nil {
		return ""
	}
	return i.conflicts[name]
}

// RequiringKnownGroups names the policies that require every group to be listed, or "".
func (i *Index) RequiringKnownGroups() string {
	if i == nil {
		return ""
	}
	return strings.Join(i.requireKnown, ", ")
}

// Groups returns every defined group in order, then by name.
func (i *Index) Groups() []Group {
	if i == nil {
		return nil
	}
	out := make([]Group, 0, len(i.groups))
	for _, g := range i.groups {
		out = append(out, g)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Order != out[b].Order {
			return out[a].Order < out[b].Order
		}
		return out[a].Name < out[b].Name
	})
	return out
}

// Readiness returns the readiness settings of a policy.
func (i *Index) Readiness(policyName string) wavev1.Readiness {
	if i == nil || i.root == nil {
		return wavev1.Readiness{}
	}
	return i.root.allReadiness[policyName]
}

// defaultChecker judges members of groups no policy defines.
var defaultChecker, _ = readiness.NewChecker(wavev1.Readiness{})

// Checker returns the compiled readiness checker of a policy ("" or an unknown policy, or one
// whose rules do not compile: the default checker).
func (i *Index) Checker(policyName string) *readiness.Checker {
	if i != nil && i.root != nil {
		if c, ok := i.root.allCheckers[policyName]; ok {
			return c
		}
	}
	return defaultChecker
}
