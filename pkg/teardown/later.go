package teardown

import (
	"slices"
	"strings"
	"sync"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
)

// LaterStore is the DELETE check's view of the groups that still have objects, per sequence, from
// the Sequence status (fed by the store that watches Sequences on every replica).
type LaterStore struct {
	mu     sync.RWMutex
	groups map[string][]groupCount // sequence -> groups with objects
}

type groupCount struct {
	name      string
	order     int32
	objects   int32
	resources []string
}

// Observe records a Sequence's groups; nil forgets the sequence.
func (s *LaterStore) Observe(seq string, obj *wavev1.Sequence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups == nil {
		s.groups = map[string][]groupCount{}
	}
	if obj == nil {
		delete(s.groups, seq)
		return
	}
	var counts []groupCount
	for _, g := range obj.Status.Groups {
		if n := g.Members + g.Terminating + g.Owned; n > 0 {
			counts = append(counts, groupCount{g.Name, g.Order, n, g.Resources})
		}
	}
	s.groups[seq] = counts
}

// Later returns, as the Sequence status says, the groups of a sequence after order that still
// have objects, how many, and their resources. complete is false when a group with objects does
// not list its resources (a status written by an older wavegate).
func (s *LaterStore) Later(seq string, order int32) (groups []string, remaining int32, resources []string, complete bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	complete = true
	for _, g := range s.groups[seq] {
		if g.order > order {
			groups = append(groups, g.name)
			remaining += g.objects
			resources = append(resources, g.resources...)
			complete = complete && len(g.resources) > 0
		}
	}
	slices.Sort(resources)
	return groups, remaining, slices.Compact(resources), complete
}

// Spanning returns the namespace's own sequences (its name, and <namespace>.<name>) whose objects
// are in more than one group, as their Sequence status says, with their earliest group's order.
func (s *LaterStore) Spanning(namespace string) []Span {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Span
	for seq, groups := range s.groups {
		if seq != namespace && !strings.HasPrefix(seq, namespace+".") || len(groups) < 2 {
			continue
		}
		earliest := groups[0].order
		for _, g := range groups[1:] {
			earliest = min(earliest, g.order)
		}
		out = append(out, Span{Sequence: seq, Earliest: earliest})
	}
	slices.SortFunc(out, func(a, b Span) int { return strings.Compare(a.Sequence, b.Sequence) })
	return out
}
