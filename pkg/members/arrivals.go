package members

import (
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// arrivals records, per object of one informer, when the informer first received it in its present
// state as far as membership goes (membershipState), and at which
// resourceVersion it last received it. The settle dates a member's change by it: a pass that reads
// the members runs some time after the change reached the cache (its worker busy with the pass
// before), and dating the change by the pass would stretch both the settle's wait and the apply's
// pace it learns from the gaps between changes.
//
// It is written by the informer's transform, which client-go calls on every object it receives
// before the object enters the cache, so a pass that reads an object from the cache at a
// resourceVersion finds that version recorded, or a later one (which says nothing of the version
// read: Object.Arrived is then zero).
//
// What the informer received before it had synced (its first list, the whole cache after a
// restart) arrived when the informer listed it, not when it changed: those moments are not told
// (synced: when the informer synced, or a moment after; every record up to it is of the list). A
// later re-list (its watch expired) dates the objects that changed meanwhile by the re-list: late,
// which only lengthens the settle.
type arrivals struct {
	mu     sync.Mutex
	of     map[types.UID]arrival
	synced time.Time
}

type arrival struct {
	version string
	state   uint64
	at      time.Time
}

// record notes that the informer received u at now.
func (a *arrivals) record(u *unstructured.Unstructured, now time.Time) {
	st := membershipState(u)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.of == nil {
		a.of = map[types.UID]arrival{}
	}
	prev, ok := a.of[u.GetUID()]
	if !ok || prev.state != st {
		prev.state, prev.at = st, now
	}
	prev.version = u.GetResourceVersion()
	a.of[u.GetUID()] = prev
}

// forget drops a deleted object's record.
func (a *arrivals) forget(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.of, uid)
}

// markSynced notes that the informer has synced.
func (a *arrivals) markSynced(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.synced = now
}

// arrived returns when the informer first received u in its present state, if the version it last
// received is u's and the informer had synced by then.
func (a *arrivals) arrived(u *unstructured.Unstructured) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rec, ok := a.of[u.GetUID()]; ok && !a.synced.IsZero() && rec.version == u.GetResourceVersion() && rec.at.After(a.synced) {
		return rec.at
	}
	return time.Time{}
}

// membershipState digests what of an object makes it a member of a group and revision: its
// labels (group, order, sequence), its generation, whether it is being deleted and whether it is a
// member in its own right (IsMember: no controller, not a claim template).
func membershipState(u *unstructured.Unstructured) uint64 {
	h := fnv.New64a()
	h.Write([]byte(labels.Set(u.GetLabels()).String()))
	h.Write(strconv.AppendInt([]byte{0}, u.GetGeneration(), 10))
	h.Write([]byte{flag(u.GetDeletionTimestamp() != nil), flag(IsMember(u))})
	return h.Sum64()
}

func flag(b bool) byte {
	if b {
		return 1
	}
	return 0
}
