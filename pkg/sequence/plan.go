// Package sequence is the controller that orders creation: per sequence it creates each group's
// wait Job once every earlier group is released, removes the scheduling gate from the pods of
// released-for groups, and reports the sequence's state in a Sequence object.
package sequence

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/readiness"
	"wavegate.io/wavegate/pkg/resolve"
)

// Member is one group member as planning sees it.
type Member struct {
	GVR        schema.GroupVersionResource
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	UID        types.UID
	Generation int64
	Resolution *resolve.Resolution
	// Ready is filled from the full object when it is at hand; planning does not use it.
	Ready *readiness.Result
}

// object is a reference to the member for Events.
func (m Member) object() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(m.APIVersion)
	u.SetKind(m.Kind)
	u.SetNamespace(m.Namespace)
	u.SetName(m.Name)
	u.SetUID(m.UID)
	return u
}

func (m Member) ref() string {
	return fmt.Sprintf("%s/%s/%s/%s", m.APIVersion, m.Kind, m.Namespace, m.Name)
}

// JobState is the state of a wait Job.
type JobState int

const (
	JobMissing JobState = iota
	JobRunning
	JobComplete
	// JobFailed: its waiter found a member that failed for good.
	JobFailed
	// JobTimedOut: the group's timeout passed.
	JobTimedOut
	// JobWaiterFailed: its waiter kept failing (errors, crashes), past the Job's backoff limit;
	// no member failed.
	JobWaiterFailed
)

// Group is the plan for one group of a sequence.
type Group struct {
	Name     string
	Order    int32
	Required bool
	Members  []Member
	// Revision identifies the members and their generations.
	Revision string
	Timeout  time.Duration
	// Readiness comes from the group's policy: that of the member that orders it. Timeout is the
	// longest of its members' policies', and OnTimeout is Release only if all of them say so.
	OnTimeout wavev1.OnTimeout
	Readiness wavev1.Readiness
	// NamespaceReadiness holds, by namespace, the readiness settings of members whose own policy
	// (none: the defaults) has other settings than Readiness: in a shared sequence the policies
	// of two namespaces may define the group differently, and the waiter judges each member by its
	// own, as the status does (checker). One entry per namespace is enough: the members of one
	// group in one namespace resolve to the same policy (policy.Index.For).
	NamespaceReadiness map[string]wavev1.Readiness
	// Open is true when every earlier group is released: the group's pods may run and its wait
	// Job may start.
	Open bool
	// Prestart is true for the group right after one whose waiter is running: its wait Job starts
	// ahead of its turn, without a deadline, so that the waiter's pod start is off the group
	// boundary's path. It releases nothing: the group still opens only when every earlier group is
	// released, and the group's timeout is armed then (see armJob).
	Prestart bool
	Released bool
	// WaitsFor names, for a group that is not open, the group it waits for directly: the latest
	// earlier group that is not released (its message and Events name it).
	WaitsFor string
	Phase    wavev1.GroupPhase
	Message  string
	// JobNamespace and JobName name the wait Job of the current revision.
	JobNamespace, JobName string
	JobState              JobState
	// JobRefused: the group is open and the API server refuses its wait Job (see planRefused).
	JobRefused bool
}

// JobStates looks up the state of a group's wait Job (JobNamespace and JobName), given the rest
// of the group's plan: the waiter of a Job must judge by the group's readiness settings.
type JobStates func(g *Group) JobState

// Plan decides, for one sequence, each group's revision and wait Job, whether it is released and
// whether it is open. It is a pure function of its inputs: the controller runs it on its cache and,
// before removing any gate, again on a consistent read from the API server.
func Plan(seq string, members []Member, idx *policy.Index, jobs JobStates, fallbackNamespace string) []*Group {
	byName := map[string]*Group{}
	// Members of one group may give it different orders (two objects' group-order labels, the
	// policies of two namespaces in a shared sequence): admission sees one object at a time. The
	// group takes the lowest, and its settings from the member giving it (then by reference), so
	// that every plan of the same members, on the cache or on a consistent read, is the same
	// whatever order they were listed in; the group's message says so. Except where a setting of
	// another member's policy is the stricter: each member is judged by its own readiness
	// settings, the group waits as long as the longest timeout, and it is released on its timeout
	// only if every member's policy says so.
	members = slices.Clone(members)
	slices.SortFunc(members, func(a, b Member) int {
		return cmp.Or(cmp.Compare(a.Resolution.GroupOrder, b.Resolution.GroupOrder), strings.Compare(a.ref(), b.ref()))
	})
	orders := map[string][]int32{}
	for _, m := range members {
		r := m.Resolution
		if o := orders[r.Group]; len(o) == 0 || o[len(o)-1] != r.GroupOrder {
			orders[r.Group] = append(o, r.GroupOrder)
		}
		timeout, onTimeout, own := policy.DefaultTimeout, wavev1.OnTimeoutBlock, wavev1.Readiness{}
		if r.Policy != nil {
			timeout, onTimeout, own = r.Policy.Timeout, r.Policy.OnTimeout, idx.Readiness(r.Policy.Policy)
		}
		g, ok := byName[r.Group]
		if !ok {
			g = &Group{Name: r.Group, Order: r.GroupOrder, Timeout: timeout, OnTimeout: onTimeout, Readiness: own}
			if r.Policy != nil {
				g.Required = r.Policy.Required
			}
			byName[r.Group] = g
		}
		g.Members = append(g.Members, m)
		g.Timeout = max(g.Timeout, timeout)
		if onTimeout != wavev1.OnTimeoutRelease {
			g.OnTimeout = wavev1.OnTimeoutBlock
		}
		if _, seen := g.NamespaceReadiness[m.Namespace]; !seen && !equality.Semantic.DeepEqual(own, g.Readiness) {
			if g.NamespaceReadiness == nil {
				g.NamespaceReadiness = map[string]wavev1.Readiness{}
			}
			g.NamespaceReadiness[m.Namespace] = own
		}
	}
	// A policy that declares its groups can require them: an earlier required group blocks the
	// later groups of the same policy even while it has no members. The policies are those the
	// group's members resolved to, which may select namespaces: in a shared sequence, each
	// namespace's policy requires its own groups.
	for _, g := range groupsOf(byName) {
		var pols []string
		for _, m := range g.Members {
			if m.Resolution.Policy != nil && !slices.Contains(pols, m.Resolution.Policy.Policy) {
				pols = append(pols, m.Resolution.Policy.Policy)
			}
		}
		slices.Sort(pols)
		for _, pol := range pols {
			for _, req := range idx.PolicyGroups(pol) {
				if !req.Required || req.Order >= g.Order {
					continue
				}
				if r, ok := byName[req.Name]; !ok {
					byName[req.Name] = &Group{Name: req.Name, Order: req.Order, Required: true, Timeout: req.Timeout,
						OnTimeout: req.OnTimeout, Readiness: idx.Readiness(req.Policy)}
				} else if len(r.Members) == 0 {
					// Required by two policies, and without members yet: as for members' settings.
					r.Order, r.Timeout = min(r.Order, req.Order), max(r.Timeout, req.Timeout)
					if req.OnTimeout != wavev1.OnTimeoutRelease {
						r.OnTimeout = wavev1.OnTimeoutBlock
					}
				}
			}
		}
	}
	groups := groupsOf(byName)
	open, prestart := true, false
	for i, g := range groups {
		sort.Slice(g.Members, func(i, j int) bool { return g.Members[i].ref() < g.Members[j].ref() })
		g.Revision = revision(g.Members)
		g.Open = open
		if len(g.Members) > 0 {
			// The Job of the current revision is kept and read even while the group is not open: a
			// group whose members did not change stays released when an earlier group changes.
			g.JobNamespace = jobNamespace(g.Members, fallbackNamespace)
			g.JobName = JobName(seq, g.Name, g.Revision)
			g.JobState = jobs(g)
			g.Released = g.JobState == JobComplete || g.JobState == JobTimedOut && g.OnTimeout == wavev1.OnTimeoutRelease
		}
		switch {
		case !open:
			g.WaitsFor = waitsForAt(groups[:i], g.Order, g.Name)
			g.Phase, g.Message = wavev1.GroupPending, fmt.Sprintf("waiting for group %s", g.WaitsFor)
		case len(g.Members) == 0:
			g.Phase, g.Message = wavev1.GroupWaiting, "required group has no members yet"
		default:
			switch g.JobState {
			case JobComplete:
				g.Phase, g.Message = wavev1.GroupReleased, "ready"
			case JobTimedOut:
				g.Phase, g.Message = wavev1.GroupTimedOut, fmt.Sprintf("not ready within %s", g.Timeout)
				if g.Released {
					g.Message += "; released anyway (onTimeout: Release)"
				}
			case JobFailed:
				g.Phase, g.Message = wavev1.GroupFailed, "a member failed; see the wait Job's logs"
			case JobWaiterFailed:
				g.Phase, g.Message = wavev1.GroupFailed, "the waiter kept failing, not a member; see the wait Job's logs and events, "+
					"and delete the Job to start a new waiter"
			default:
				g.Phase, g.Message = wavev1.GroupWaiting, "waiting for its members to be ready"
			}
		}
		if o := orders[g.Name]; len(o) > 1 {
			g.Message += fmt.Sprintf("; its members give it different orders %v, the lowest is used: give them all the same %s (or one WavePolicy)",
				o, keys.GroupOrderLabel)
		}
		if !g.Released && open {
			open = false
			prestart = len(g.Members) > 0 && (g.JobState == JobRunning || g.JobState == JobMissing)
			continue
		}
		if prestart {
			g.Prestart, prestart = len(g.Members) > 0, false
		}
	}
	return groups
}

// waitsForAt is what a group at order and name that is not open waits for directly: the latest
// group of the plan before it that is not released. Its message and Events name that one, not the
// first of the sequence, so that they do not change, nor send an Event, each time a group further
// back is released (a chain's Events were quadratic in its length).
func waitsForAt(plan []*Group, order int32, name string) string {
	var out string
	for _, g := range plan {
		if !g.Released && (g.Order < order || g.Order == order && g.Name < name) {
			out = g.Name
		}
	}
	return out
}

func groupsOf(m map[string]*Group) []*Group {
	out := make([]*Group, 0, len(m))
	for _, g := range m {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Order != out[j].Order {
			return out[i].Order < out[j].Order
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// revision hashes the members' identities and generations: adding, removing or changing a member
// makes a new revision.
func revision(members []Member) string {
	h := sha256.New()
	for _, m := range members {
		fmt.Fprintf(h, "%s %s %d\n", m.ref(), m.UID, m.Generation)
	}
	return hex.EncodeToString(h.Sum(nil))[:10]
}

// jobNamespace is where a group's wait Job runs: its members' namespace when they are all in one,
// else the fallback (wavegate's namespace): a group of cluster-scoped objects, or one that spans
// several namespaces of a shared sequence. No tenant can then create a pod next to the waiter
// (or delete its Job) to decide for another tenant's members.
func jobNamespace(members []Member, fallback string) string {
	ns := ""
	for i, m := range members {
		if i > 0 && m.Namespace != ns || m.Namespace == "" {
			return fallback
		}
		ns = m.Namespace
	}
	if ns == "" {
		return fallback
	}
	return ns
}

// JobName is the deterministic name of the wait Job of (sequence, group, revision).
func JobName(seq, group, rev string) string {
	h := sha256.Sum256([]byte(seq + "\x00" + group + "\x00" + rev))
	g := strings.ToLower(group)
	g = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			return r
		}
		return '-'
	}, g)
	if len(g) > 30 {
		g = g[:30]
	}
	return strings.TrimRight("wavegate-wait-"+strings.Trim(g, "-"), "-") + "-" + hex.EncodeToString(h[:])[:10]
}

// ObjectName is the name of the Sequence object reporting on a sequence: the sequence's own name
// when that is a valid object name, else that name made valid (lowercase, every other character a
// dash) with a hash of the sequence's name appended. A valid name that ends the way such a name
// does (a dash and eight hex digits) is hashed too: otherwise a namespace named after the object
// name of a shared sequence (shop-<hash of "Shop">, say, on a platform whose tenants name their
// namespaces) would share that sequence's object, and its passes would read, overwrite and delete
// the other sequence's status.
func ObjectName(seq string) string {
	if len(validation.IsDNS1123Subdomain(seq)) == 0 && !hashedName.MatchString(seq) {
		return seq
	}
	h := sha256.Sum256([]byte(seq))
	s := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return '-'
	}, seq)
	return strings.Trim(s, "-") + "-" + hex.EncodeToString(h[:])[:8]
}

// hashedName matches how the names ObjectName hashes end.
var hashedName = regexp.MustCompile(`-[0-9a-f]{8}$`)

// ownObject reports whether a Sequence object is the one ObjectName names for the sequence it
// records: any other (a name a collision of hashes gave two sequences, or one an earlier version
// named differently) is not read, written or served for it.
func ownObject(s *wavev1.Sequence) bool { return s.Name == ObjectName(s.Spec.Sequence) }
