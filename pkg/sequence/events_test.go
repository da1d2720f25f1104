package sequence

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/keys"
	"wavegate.io/wavegate/pkg/readiness"
	"wavegate.io/wavegate/pkg/resolve"
)

// recorded collects the reasons and notes of Events, and the names of the objects they regard and
// of their related objects.
type recorded struct{ got, regarding, related []string }

func (r *recorded) Eventf(regarding runtime.Object, related runtime.Object, _, reason, _, note string, args ...any) {
	r.got = append(r.got, reason+": "+fmt.Sprintf(note, args...))
	if o, ok := regarding.(metav1.Object); ok {
		r.regarding = append(r.regarding, o.GetNamespace()+"/"+o.GetName())
	}
	name := ""
	if j, ok := related.(*batchv1.Job); ok {
		name = j.Name
	}
	r.related = append(r.related, name)
}

var _ events.EventRecorder = &recorded{}

// member is a member that is ready or in progress.
func member(name string, ready bool) Member {
	st := readiness.InProgress
	if ready {
		st = readiness.Ready
	}
	return Member{Name: name, Ready: &readiness.Result{Status: st}}
}

// obj is a member object of group in namespace shop, named after it.
func obj(group string) memberObject {
	u := &unstructured.Unstructured{}
	u.SetName(group)
	u.SetNamespace("shop")
	u.SetLabels(map[string]string{keys.GroupLabel: group})
	return memberObject{Member: Member{Name: group, Resolution: &resolve.Resolution{Group: group, GroupLabel: keys.GroupLabel}}, Object: u}
}

// TestEventsOncePerChange: a group's Event is sent once per change of its phase or message, even
// while the cached Sequence still shows an older status (a busy sequence reconciles many times
// before the cache sees its own status write: the same GroupReleased was sent on every reconcile).
func TestEventsOncePerChange(t *testing.T) {
	objs := []memberObject{obj("db"), obj("web")}
	plan := func(dbReady bool) []*Group {
		db := &Group{Name: "db", Members: []Member{member("db", dbReady)}, Open: true, Phase: wavev1.GroupWaiting, Message: "waiting for its members to be ready"}
		if dbReady {
			db.Released, db.Phase, db.Message = true, wavev1.GroupReleased, "ready"
		}
		web := &Group{Name: "web", Members: []Member{member("web", false)}, Open: dbReady, WaitsFor: "db", Phase: wavev1.GroupWaiting, Message: "waiting"}
		return []*Group{db, web}
	}
	rec := &recorded{}
	r := &Reconciler{Recorder: rec}
	stale := &wavev1.Sequence{} // the cache has not seen any status yet
	for range 3 {
		r.emitEvents("shop", plan(false), stale, objs)
	}
	for range 3 {
		r.emitEvents("shop", plan(true), stale, objs)
	}
	want := []string{
		"WaitingForGroup: group db: waiting for its members to be ready (0/1 members ready)",
		"WaitingForGroup: group web waits for group db: 0/1 members ready",
		"GroupReleased: group db: ready (1/1 members ready)",
		"WaitingForGroup: group web: waiting (0/1 members ready)",
	}
	if d := cmp.Diff(want, rec.got); d != "" {
		t.Errorf("Events (-want +got):\n%s", d)
	}

	// A restarted manager does not repeat what the status already says.
	rec.got = nil
	r = &Reconciler{Recorder: rec}
	status := &wavev1.Sequence{Status: wavev1.SequenceStatus{Groups: []wavev1.GroupStatus{
		{Name: "db", Phase: wavev1.GroupReleased, Message: "ready", Ready: 1},
		{Name: "web", Phase: wavev1.GroupWaiting, Message: "waiting", Ready: 0},
	}}}
	r.emitEvents("shop", plan(true), status, objs)
	if len(rec.got) != 0 {
		t.Errorf("a restarted manager sent %q", rec.got)
	}
}

// TestEventsNotPerReadyCount: members becoming ready one by one send no Event each, on the group
// nor on the groups that wait for it. An Event per count sent one per ready member to up to ten
// members of every later group.
func TestEventsNotPerReadyCount(t *testing.T) {
	objs := []memberObject{obj("db"), obj("cache"), obj("web")}
	// plan has db with ready of its three members ready; cache is released once db is.
	plan := func(ready int, cacheReleased bool) []*Group {
		db := &Group{Name: "db", Open: true, Phase: wavev1.GroupWaiting, Message: "waiting for its members to be ready"}
		for i := range 3 {
			db.Members = append(db.Members, member(fmt.Sprintf("db-%d", i), i < ready))
		}
		cache := &Group{Name: "cache", Members: []Member{member("cache", cacheReleased)}, WaitsFor: "db", Phase: wavev1.GroupPending, Message: "waiting for group db"}
		web := &Group{Name: "web", Members: []Member{member("web", false)}, WaitsFor: "cache", Phase: wavev1.GroupPending, Message: "waiting for group cache"}
		if ready == 3 {
			db.Released, db.Phase, db.Message = true, wavev1.GroupReleased, "ready"
			cache.Open, cache.Phase, cache.Message = true, wavev1.GroupWaiting, "waiting for its members to be ready"
		}
		if cacheReleased {
			cache.Released, cache.Phase, cache.Message = true, wavev1.GroupReleased, "ready"
			web.Open, web.Phase, web.Message = true, wavev1.GroupWaiting, "waiting for its members to be ready"
		}
		return []*Group{db, cache, web}
	}
	rec := &recorded{}
	r := &Reconciler{Recorder: rec}
	for ready := range 4 {
		r.emitEvents("shop", plan(ready, false), &wavev1.Sequence{}, objs)
	}
	r.emitEvents("shop", plan(3, true), &wavev1.Sequence{}, objs)
	want := []string{
		"WaitingForGroup: group db: waiting for its members to be ready (0/3 members ready)",
		"WaitingForGroup: group cache waits for group db: 0/3 members ready",
		"WaitingForGroup: group web waits for group cache: 0/1 members ready",
		"GroupReleased: group db: ready (3/3 members ready)",
		"WaitingForGroup: group cache: waiting for its members to be ready (0/1 members ready)",
		"GroupReleased: group cache: ready (1/1 members ready)",
		"WaitingForGroup: group web: waiting for its members to be ready (0/1 members ready)",
	}
	if d := cmp.Diff(want, rec.got); d != "" {
		t.Errorf("Events (-want +got):\n%s", d)
	}
}

// TestChainEventsLinear: a chain released one group at a time, planned by Plan, sends each group
// one Event per phase (Pending, Waiting, Released), each pending group naming the group right
// before it. Naming the first unreleased group of the sequence changed every pending group's
// message, and sent it an Event, each time a group was released: 36 Events more for ten groups,
// 406 more for thirty.
func TestChainEventsLinear(t *testing.T) {
	const n = 10
	var ms []Member
	var objs []memberObject
	for i := range n {
		name := fmt.Sprintf("g%d", i)
		ms = append(ms, m(name, int32(i), "shop", name, 1))
		objs = append(objs, obj(name))
	}
	rec := &recorded{}
	r := &Reconciler{Recorder: rec}
	for released := range n + 1 {
		// The groups before released are complete, the open one's Job runs, the others have none.
		jobs := func(g *Group) JobState {
			job := g.JobName
			for i := range min(released+1, n) {
				if job == JobName("shop", ms[i].Resolution.Group, revision(ms[i:i+1])) {
					return map[bool]JobState{true: JobComplete, false: JobRunning}[i < released]
				}
			}
			return JobMissing
		}
		plan := Plan("shop", ms, nil, jobs, "wavegate-system")
		for i, g := range plan {
			if g.Phase == wavev1.GroupPending {
				if want := fmt.Sprintf("waiting for group g%d", i-1); g.Message != want {
					t.Errorf("with %d released, %s says %q, want %q", released, g.Name, g.Message, want)
				}
			}
		}
		sent := len(rec.got)
		r.emitEvents("shop", plan, &wavev1.Sequence{}, objs)
		// Each Event about a group that waits is related to the wait Job of the group it names, so
		// that the events API keeps Events about different blockers in different series.
		for i := sent; i < len(rec.got); i++ {
			_, blocker, waits := strings.Cut(strings.TrimSuffix(rec.got[i], ": 0/1 members ready"), " waits for group ")
			if want := JobName("shop", blocker, revision([]Member{byGroup(ms, blocker)})); waits && rec.related[i] != want {
				t.Errorf("%q is related to Job %q, want %q", rec.got[i], rec.related[i], want)
			}
		}
	}
	byReason := map[string]int{}
	for _, e := range rec.got {
		reason, _, _ := strings.Cut(e, ":")
		byReason[reason]++
	}
	// Every group is released and waits once open; every group but the first also waits, once, for
	// the group before it.
	want := map[string]int{ReasonGroupReleased: n, ReasonWaitingForGroup: n + n - 1}
	if d := cmp.Diff(want, byReason); d != "" {
		t.Errorf("Events by reason (-want +got):\n%s\nEvents: %q", d, rec.got)
	}
}

// TestEventsGoToTheMembersOfEachGroup: a group's Events regard its members by the group they
// resolved to, also those a policy's group label groups (they carry no wavegate.io/group), and
// only them: the caller passes the sequence's members, not every object that names it.
func TestEventsGoToTheMembersOfEachGroup(t *testing.T) {
	byPolicy := obj("db")
	byPolicy.Object.SetName("postgres")
	byPolicy.Object.SetLabels(map[string]string{"app.kubernetes.io/component": "db"})
	byPolicy.Resolution.GroupLabel = "app.kubernetes.io/component"
	rec := &recorded{}
	r := &Reconciler{Recorder: rec}
	db := &Group{Name: "db", Members: []Member{member("postgres", false)}, Open: true, Phase: wavev1.GroupWaiting, Message: "waiting for its members to be ready"}
	r.emitEvents("shop", []*Group{db}, &wavev1.Sequence{}, []memberObject{byPolicy})
	if d := cmp.Diff([]string{"shop/postgres"}, rec.regarding); d != "" {
		t.Errorf("Events regard (-want +got):\n%s", d)
	}
}
