package sequence

// opener is the one decision that opens a group: creates its wait Job (starting the group's clock)
// and removes its pods' scheduling gates. A group opens only when the plan on the cache says it is
// open *and* a plan on a consistent read of the API server says so too, so that a cache that has
// not seen an earlier group's objects yet never opens a later group early. The consistent read is
// made at most once, and only when some group is a candidate. Reconcile decides through it for
// both Jobs and gates; the no-early-release property test drives it with a lagging cache.
//
// A pod template that was released once is cleared: admission lets its new pods start without the
// gate (the Sequence's status lists it), and the pods that admission gated before it knew are
// released the same way, without another consistent read, while the cache says their group is
// open.
type opener struct {
	cached map[string]bool
	// cleared are the templates per group that were released before (the Sequence's status) or
	// by this pass.
	cleared map[string]map[string]bool
	// fresh plans on a consistent read and returns which groups are open.
	fresh     func() (map[string]bool, error)
	freshOpen map[string]bool
}

func newOpener(cached []*Group, cleared map[string][]string, fresh func() (map[string]bool, error)) *opener {
	o := &opener{cached: make(map[string]bool, len(cached)), cleared: map[string]map[string]bool{}, fresh: fresh}
	for _, g := range cached {
		o.cached[g.Name] = g.Open
	}
	for g, ts := range cleared {
		for _, t := range ts {
			o.clear(g, t)
		}
	}
	return o
}

func (o *opener) clear(group, template string) {
	if o.cleared[group] == nil {
		o.cleared[group] = map[string]bool{}
	}
	o.cleared[group][template] = true
}

// CachedOpen reports what the cache alone says: a group it does not call open stays closed without
// a consistent read.
func (o *opener) CachedOpen(group string) bool { return o.cached[group] }

// Open reports whether a group may be opened now.
func (o *opener) Open(group string) (bool, error) {
	if !o.cached[group] {
		return false, nil
	}
	if o.freshOpen == nil {
		m, err := o.fresh()
		if err != nil {
			return false, err
		}
		o.freshOpen = m
	}
	return o.freshOpen[group], nil
}

// Cleared reports whether a gated pod of a group, made from template, may be released without a
// consistent read: its template is cleared and the cache says its group is open. Bare pods (no
// template) are never cleared.
func (o *opener) Cleared(group, template string) bool {
	return o.cached[group] && template != "" && o.cleared[group][template]
}

// clearedCopy is an opener that knows only the cleared templates (and the cache's open groups): a
// copy for a step that runs beside the others.
func (o *opener) clearedCopy() *opener {
	c := &opener{cached: o.cached, cleared: make(map[string]map[string]bool, len(o.cleared))}
	for g, ts := range o.cleared {
		c.cleared[g] = make(map[string]bool, len(ts))
		for t := range ts {
			c.cleared[g][t] = true
		}
	}
	return c
}

// Release reports whether a gated pod of a group, made from template, may be released now: its
// template is cleared, or its group opens (Open). A template released through Open is cleared from
// then on.
func (o *opener) Release(group, template string) (bool, error) {
	if o.Cleared(group, template) {
		return true, nil
	}
	open, err := o.Open(group)
	if open && template != "" {
		o.clear(group, template)
	}
	return open, err
}

// openGroups returns which groups of a plan are open.
func openGroups(plan []*Group) map[string]bool {
	out := make(map[string]bool, len(plan))
	for _, g := range plan {
		out[g.Name] = g.Open
	}
	return out
}
