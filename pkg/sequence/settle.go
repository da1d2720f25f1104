package sequence

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"wavegate.io/wavegate/pkg/policy"
)

// membershipSettle is how long, at least, a sequence's members must stay the same (none added,
// removed or changed in generation, as this manager's cache sees them) before any of its groups
// opens. One apply or sync creates the objects of several groups one after the other, in its own
// order: Argo CD applies a wave by kind, so a later group's Deployment comes before an earlier
// group's StatefulSet and Job, and the Deployment's pods were created before those. A group opened
// on the groups that existed when its pods were created would start before an earlier group's
// workload that the same sync applied a moment later (on the local cluster, with examples/shop
// synced without waves: the web released when the database group was only its Service, ready at
// once). The settle waits out such an apply: each object it creates restarts it, and it lasts
// paceFactor times the apply's pace when that is longer (see settled.pace).
const membershipSettle = 150 * time.Millisecond

// paceFactor and paceHorizon set the settle by the pace of the apply: the settle lasts paceFactor
// times the longest gap between two changes of the sequence's members, each at most paceHorizon
// after the one before. Apply tools create the next object a few to a hundred milliseconds after
// the last (Argo CD's sync of examples/shop: 345 ms for five objects), and slower on a loaded
// machine: on one 2.7 times slower, 150 ms was not enough, and the web of that sync was released
// before the database's StatefulSet existed. The gaps of one apply differ (by kind, by admission
// webhooks), hence the factor; and the gap after a later group's workload is the longest, since
// its pods, admitted by wavegate's webhook, and the wait Jobs wavegate starts meanwhile load the API
// server while the apply goes on: on the local cluster with busy loops competing for its cores,
// Argo CD's gap from the web's Deployment to the database's StatefulSet was up to 2.5 times the
// one before it (24 syncs), so the factor leaves twice that. Changes are dated by when the cache
// received them where a pass can tell (changeDates), else by the pass's read. Changes more than
// paceHorizon apart are separate applies: an apply that pauses longer between two groups' objects
// is not covered, nor one whose later objects come more than paceFactor times slower than its
// earlier ones.
const (
	paceFactor  = 5
	paceHorizon = time.Second
)

// MembershipSettleMax bounds the settle: members that keep changing (each change sooner after the
// last than the settle) hold the sequence's groups closed for at most this long from the first
// change, then stop holding them until the changes pause. No apply tool creates objects back to
// back for that long; a member that changes forever (two controllers fighting over its spec, say)
// would otherwise keep every group of its sequence closed, a deadlock. While it holds longer than
// settleReported, the Sequence's Ready condition says so.
const MembershipSettleMax = 30 * time.Second

// settleReported is how long a settle holds before the Sequence's status reports it: an apply's
// settle (a few hundred milliseconds; up to a few seconds for a slow apply of many objects) is not
// worth a status write.
const settleReported = time.Second

// settling remembers, per sequence, what its members were when this manager last saw them change,
// and when. Like recentReleases it lives in memory: a restarted manager waits one settle period
// from its first pass.
type settling struct {
	mu   sync.Mutex
	seen map[string]settled
}

type settled struct {
	members string
	// last is when the last change came (as changeDates dates it), and since when the members
	// must have stayed the same from: the last change, and for a sequence this manager had not
	// seen, no sooner than the end of the first pass's read (a restarted manager knows nothing of
	// the apply's pace, and waits one settle). changing is when this manager first saw the changes
	// that hold the groups (a pass's read: it bounds them, see MembershipSettleMax, and a run
	// dated by arrivals long past, after passes that could not reach the settle, must still hold).
	// Only a pass that saw the members a settle after their last change (quiet) ends the changes:
	// one that comes later than that after the pass before does not tell whether they were quiet
	// in between (a pass may just have been slow) unless the last change is dated. Changes seen a
	// bound or more after the pass before (passes that could not reach the settle: the tracker
	// re-listing, the sequence frozen) are a new run.
	last, since, changing time.Time
	quiet                 bool
	// pace is the longest gap between two changes seen one after the other, each at most
	// paceHorizon after the last, whether or not a pass saw the members quiet in between: an apply
	// slower than the settle lets the earlier group open on the objects it created first (its
	// Service), then goes on, and the next gap counts. A gap surely longer than paceHorizon (even
	// from the earliest a change dated by a read can have come) starts afresh.
	pace time.Duration
	// What the last pass read: when it began and ended reading, with which policies and
	// namespace labels, and each member's group and generation (memberKey), to date the next
	// pass's changes by.
	read, ended time.Time
	policies    *policy.Index
	namespaces  map[string]string
	keys        map[types.UID]string
}

// settle is how long the members must stay the same.
func (s settled) settle() time.Duration {
	return max(membershipSettle, paceFactor*s.pace)
}

// hold is what the settle says of a sequence at one pass.
type hold struct {
	// Wait is how much longer its groups must stay closed (zero: they may open).
	Wait time.Duration
	// Changing is for how long the changes that hold them have been going on (zero when Wait is).
	Changing time.Duration
	// Settle is how long the members must stay the same, at the apply's pace.
	Settle time.Duration
	// Recheck is when a pass must look again to find the members quiet (zero: it found them so).
	// It outlasts Wait once MembershipSettleMax has let the groups open: without that pass, the
	// changes would never end, and the next apply, however much later, would not settle at all.
	Recheck time.Duration
}

// reading is one pass's read of a sequence's members, for the settle to date their changes by.
type reading struct {
	// The members were read from the cache between started and ended.
	started, ended time.Time
	policies       *policy.Index
	// namespaces digests, per namespace of the members, the labels they were resolved with.
	namespaces map[string]string
	// arrived is, per member, when the informer received its object in its present state as far as
	// membership goes (members.Object.Arrived), where known.
	arrived map[types.UID]time.Time
}

// wait returns the hold on a sequence's groups, given its plan on the members a pass read.
// bound is how long, at most, changes hold the groups (MembershipSettleMax).
func (s *settling) wait(seq string, plan []*Group, rd reading, bound time.Duration) hold {
	members := membership(plan)
	now := rd.ended
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]settled{}
	}
	cur, ok := s.seen[seq]
	if !ok || cur.members != members {
		if !ok || cur.quiet || now.Sub(cur.ended) >= bound {
			cur.changing = now
		}
		for i, c := range changeDates(cur, ok, plan, rd) {
			switch gap := c.at.Sub(cur.last); {
			case !ok && i == 0:
			case c.earliest.Sub(cur.last) > paceHorizon:
				cur.pace = 0
			case gap <= paceHorizon:
				cur.pace = max(cur.pace, gap)
			}
			if c.at.After(cur.last) {
				cur.last = c.at
			}
		}
		if cur.last.After(cur.since) {
			cur.since = cur.last
		}
		if !ok && now.After(cur.since) {
			cur.since = now
		}
		cur.members, cur.quiet = members, false
	}
	// Changes are dated by when the informer received them, so a pass may see the last of them
	// already a settle old: nothing has changed since, and the members are quiet.
	if now.Sub(cur.since) >= cur.settle() {
		cur.quiet = true
	}
	cur.read, cur.ended, cur.policies, cur.namespaces, cur.keys = rd.started, rd.ended, rd.policies, rd.namespaces, memberKeys(plan)
	s.seen[seq] = cur
	h := hold{Settle: cur.settle()}
	if cur.quiet {
		return h
	}
	h.Recheck = max(h.Settle-now.Sub(cur.since), time.Nanosecond)
	if h.Wait = max(min(h.Recheck, bound-now.Sub(cur.changing)), 0); h.Wait > 0 {
		h.Changing = now.Sub(cur.changing)
	}
	return h
}

// change is when a change came: at, and no sooner than earliest (a change dated by a read came
// after the pass before began reading, and may have come any time from then).
type change struct{ at, earliest time.Time }

// changeDates dates, in order, the changes a pass found in a sequence's members since the pass
// before (prev, when known). A member that joined, or whose generation or group changed, changed
// when the informer received its object so, if that came after the pass before began reading: what
// that pass read did not have it. Any other change is dated by the end of this pass's read, as is
// a member whose object the informer received before (what changed is then not the object: a policy,
// its namespace) or at an unknown moment: a member gone, groups reordered, the policies or the
// namespaces' labels changed.
func changeDates(prev settled, known bool, plan []*Group, rd reading) []change {
	read := change{at: rd.ended, earliest: prev.read}
	if known && (prev.policies != rd.policies || !maps.Equal(prev.namespaces, rd.namespaces)) {
		return []change{read}
	}
	var out []change
	seen := map[types.UID]bool{}
	for _, g := range plan {
		for _, m := range g.Members {
			key, had := prev.keys[m.UID]
			if had {
				seen[m.UID] = true
			}
			if had && key == memberKey(g, m) {
				continue
			}
			if at, ok := rd.arrived[m.UID]; ok && at.After(prev.read) && !at.After(rd.ended) {
				out = append(out, change{at: at, earliest: at})
			} else {
				out = append(out, read)
			}
		}
	}
	if len(seen) < len(prev.keys) || len(out) == 0 {
		out = append(out, read)
	}
	slices.SortFunc(out, func(a, b change) int { return a.at.Compare(b.at) })
	return out
}

// memberKey is what of a member its group's revision and place depend on, besides its identity.
func memberKey(g *Group, m Member) string {
	return g.Name + "\x00" + strconv.FormatInt(m.Generation, 10)
}

func memberKeys(plan []*Group) map[types.UID]string {
	out := map[types.UID]string{}
	for _, g := range plan {
		for _, m := range g.Members {
			out[m.UID] = memberKey(g, m)
		}
	}
	return out
}

func (s *settling) forget(seq string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seen, seq)
}

// membership identifies every group's members with their generations (the groups' revisions).
func membership(plan []*Group) string {
	var b strings.Builder
	for _, g := range plan {
		b.WriteString(g.Name)
		b.WriteByte('=')
		b.WriteString(g.Revision)
		b.WriteByte('\n')
	}
	return b.String()
}
