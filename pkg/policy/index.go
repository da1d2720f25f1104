// Package policy compiles WavePolicy objects into an immutable index that admission and the
// controllers consult without calling the API server.
package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

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
type Index struct {
	readiness    map[string]wavev1.Readiness
	checkers     map[string]*readiness.Checker
	groupLabels  []string
	groups       map[string]Group
	conflicts    map[string]string
	requireKnown []string
}

// Compile builds an Index. Policies are read in name order so that the result does not depend on
// list order. A group that two policies define with different orders is recorded as a conflict:
// members of that group are denied until the policies agree.
func Compile(policies []wavev1.WavePolicy) *Index {
	sorted := slices.Clone(policies)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	idx := &Index{groups: map[string]Group{}, conflicts: map[string]string{}, readiness: map[string]wavev1.Readiness{},
		checkers: map[string]*readiness.Checker{}}
	for i := range sorted {
		p := &sorted[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		if l := p.Spec.GroupLabel; l != "" && l != keys.GroupLabel && !slices.Contains(idx.groupLabels, l) {
			idx.groupLabels = append(idx.groupLabels, l)
		}
		idx.readiness[p.Name] = p.Spec.Readiness
		if c, err := readiness.NewChecker(p.Spec.Readiness); err == nil {
			idx.checkers[p.Name] = c
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
	return idx
}

func groupOf(p *wavev1.WavePolicy, g wavev1.GroupSpec) Group {
	out := Group{
		Name: g.Name, Order: g.Order, Required: g.Required, Policy: p.Name,
		Timeout: DefaultTimeout, OnTimeout: wavev1.OnTimeoutBlock, Teardown: wavev1.TeardownOrdered,
	}
	d := p.Spec.Defaults
	if d.Timeout != nil {
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
	if g.Timeout != nil {
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

// GroupLabels returns the label keys that carry an object's group, wavegate.io/group first.
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
	if i == nil {
		return wavev1.Readiness{}
	}
	return i.readiness[policyName]
}

// defaultChecker judges members of groups no policy defines.
var defaultChecker, _ = readiness.NewChecker(wavev1.Readiness{})

// Checker returns the compiled readiness checker of a policy ("" or an unknown policy, or one
// whose rules do not compile: the default checker).
func (i *Index) Checker(policyName string) *readiness.Checker {
	if i != nil {
		if c, ok := i.checkers[policyName]; ok {
			return c
		}
	}
	return defaultChecker
}
