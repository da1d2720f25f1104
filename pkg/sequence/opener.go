package sequence

// opener is the one decision that opens a group: creates its wait Job (starting the group's clock)
// and removes its pods' scheduling gates. A group opens only when the plan on the cache says it is
// open *and* a plan on a consistent read of the API server made by the same reconcile says so too,
// so that a cache that has not seen an earlier group's objects yet (a new member, an upgrade)
// never opens a later group early. The consistent read is made at most once per reconcile, and
// only when some group is a candidate. Reconcile decides through it for both Jobs and gates; the
// no-early-release property test drives it with a lagging cache and checks every release.
//
// A template released once is cleared in the Sequence's status, and admission lets its new pods
// start without the gate; the pods it gated before that are still released only through Open.
type opener struct {
	cached map[string]bool
	// fresh plans on a consistent read and returns which groups are open.
	fresh     func() (map[string]bool, error)
	freshOpen map[string]bool
}

func newOpener(cached []*Group, fresh func() (map[string]bool, error)) *opener {
	o := &opener{cached: make(map[string]bool, len(cached)), fresh: fresh}
	for _, g := range cached {
		o.cached[g.Name] = g.Open
	}
	return o
}

// CachedOpen reports what the cache alone says: a group it does not call open stays closed without
// a consistent read.
func (o *opener) CachedOpen(group string) bool { return o.cached[group] }

// Read reports whether the consistent read has been made.
func (o *opener) Read() bool { return o.freshOpen != nil }

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

// openGroups returns which groups of a plan are open.
func openGroups(plan []*Group) map[string]bool {
	out := make(map[string]bool, len(plan))
	for _, g := range plan {
		out[g.Name] = g.Open
	}
	return out
}
