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
// start without the gate; the pods it gated before that are still released only through OpenPods.
type opener struct {
	cached openness
	// fresh plans on a consistent read and returns which groups are open.
	fresh     func() (openness, error)
	freshOpen *openness
}

func newOpener(cached openness, fresh func() (openness, error)) *opener {
	return &opener{cached: cached, fresh: fresh}
}

// Planned reports whether the cache's plan has the group (a tracked member is in it, or a policy
// requires it).
func (o *opener) Planned(group string) bool {
	_, ok := o.cached.groups[group]
	return ok
}

// CachedOpenPods reports what the cache alone says of a group's pods: a group it does not call
// open stays closed without a consistent read. pos is asked only for a group the plan does not
// have (podGroup).
func (o *opener) CachedOpenPods(group string, pos func() podGroup) bool {
	return o.cached.opens(group, pos)
}

// Requires returns, for the pods of a group that the cache's plan has and opens, a group that
// their own namespace's policy requires before them and that the plan does not have (it has no
// members yet): what they wait for. Empty: none, or the group is not open.
func (o *opener) Requires(group string, pos func() podGroup) string {
	if open := o.cached.groups[group]; !open {
		return ""
	}
	return o.cached.missing(pos())
}

// Read reports whether the consistent read has been made.
func (o *opener) Read() bool { return o.freshOpen != nil }

// Open reports whether a group of the plan may be opened now (its wait Job armed). A group the
// consistent read does not have is closed.
func (o *opener) Open(group string) (bool, error) {
	return o.open(group, nil)
}

// OpenPods reports whether a group's gated pods may be released now. Of a group that a plan does
// not have (no tracked member), pos tells where the pods stand (podGroup).
func (o *opener) OpenPods(group string, pos func() podGroup) (bool, error) {
	return o.open(group, pos)
}

func (o *opener) open(group string, pos func() podGroup) (bool, error) {
	if !o.cached.opens(group, pos) {
		return false, nil
	}
	if o.freshOpen == nil {
		m, err := o.fresh()
		if err != nil {
			return false, err
		}
		o.freshOpen = &m
	}
	return o.freshOpen.opens(group, pos), nil
}

// openness is which groups a plan opens. Its own groups are open as it says. A group it does not
// have, one whose pods are gated but that has no tracked member (pods are never members: a bare
// pod, the pods of a controller wavegate does not track), opens as an empty group at its pods'
// order would: once every group of the plan before it is released, and every group its policy
// requires before it has members. Such a group holds up no later group: nothing tells when pods
// that are not members are done.
//
// The zero value opens nothing.
type openness struct {
	groups map[string]bool
	// others is whether a group outside the plan may open at all.
	others bool
	// blocked is true when the plan has a group that is not released: untilOrder and untilName are
	// its first, and only groups that sort before it (by order, then name, as the plan sorts) open.
	blocked    bool
	untilOrder int32
	untilName  string
}

// openGroups returns which groups of a plan are open, and which groups outside it would be.
func openGroups(plan []*Group) openness {
	out := openness{groups: make(map[string]bool, len(plan)), others: true}
	for _, g := range plan {
		out.groups[g.Name] = g.Open
		if !g.Released && !out.blocked {
			out.blocked, out.untilOrder, out.untilName = true, g.Order, g.Name
		}
	}
	return out
}

// closed is the same plan opening nothing: no group of it, and no group outside it (a sequence
// whose members have not settled yet).
func (s openness) closed() openness {
	out := openness{groups: make(map[string]bool, len(s.groups))}
	for g := range s.groups {
		out.groups[g] = false
	}
	return out
}

// opens reports whether the pods of a group may go. pos tells where they stand (podGroup); nil: a
// group outside the plan is closed (a wait Job's group must be the plan's).
func (s openness) opens(group string, pos func() podGroup) bool {
	if open, ok := s.groups[group]; ok || pos == nil || !s.others {
		// The pods of an open group also wait for the groups their own namespace's policy requires
		// to be in the plan: that policy may be no member's (the plan has the group only because
		// another namespace's policy requires it, or its members are all in other namespaces).
		// A member's pods find them there: the plan adds the groups each member's policy requires.
		return open && (pos == nil || s.missing(pos()) == "")
	}
	until, required := s.waitsFor(group, pos())
	return until == "" && required == ""
}

// waitsFor returns what the pods of a group outside the plan wait for: the plan's first group that
// is not released, if it sorts before theirs, or else a group their policy requires that the plan
// does not have (it has no members yet, so it is not released). Both empty: they may go.
func (s openness) waitsFor(group string, p podGroup) (until, required string) {
	if s.blocked && (s.untilOrder < p.order || s.untilOrder == p.order && s.untilName <= group) {
		return s.untilName, ""
	}
	return "", s.missing(p)
}

// missing returns a group that the pods' policy requires before theirs and the plan does not have
// (it has no members yet, so it is not released); empty: none.
func (s openness) missing(p podGroup) string {
	for _, r := range p.requires {
		if _, ok := s.groups[r]; !ok {
			return r
		}
	}
	return ""
}

// podGroup is where the group of a gated pod stands in its sequence when the plan does not have
// the group: its pods' group order, and the groups their policy requires before that order.
type podGroup struct {
	order    int32
	requires []string
}
