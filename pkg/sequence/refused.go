package sequence

// Refused wait Jobs: a group whose wait Job the API server refuses (a policy engine, an exhausted
// ResourceQuota) has no Job whose deadline counts its timeout. Its clock is kept here and in the
// Sequence's status instead.

import (
	"fmt"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/policy"
)

// refusalRetry is how often a refused wait Job is asked for again.
const refusalRetry = 10 * time.Second

// refusals remembers, per sequence, since when the API server has refused the wait Jobs
// ("namespace/name") of open groups. The Sequence's status keeps it across restarts
// (GroupStatus.WaitJobRefusedSince); this memory covers the pass between the first refusal and the
// status written after it (a manager restarted in between starts the clock at the next refusal,
// which errs long).
type refusals struct {
	mu   sync.Mutex
	seen map[string]map[string]time.Time
	// dropped are, per sequence, the refusals a pass reset (the group closed, its revision changed,
	// its Job was created, the sequence was frozen) and when: for droppedTTL, a time the status shows
	// for them from before the reset is not read back. The status written by that pass clears it, but
	// the next passes may still read the Sequence as it was, and a group that reopened meanwhile would
	// time out on the clock of its earlier opening.
	dropped map[string]map[string]time.Time
}

// droppedTTL is how long a reset refusal's time is not read back from the status: far longer than
// the cache takes to show the status written with the reset. A refusal noted after the reset is in
// memory, and read from there.
const droppedTTL = time.Minute

// note records that a sequence's wait Job was refused at a time, keeping the first. The time is
// rounded up to the second, as the status keeps it: a restarted manager's clock must not start
// earlier than this one's.
func (r *refusals) note(seq, job string, at time.Time) {
	if t := at.Truncate(time.Second); !t.Equal(at) {
		at = t.Add(time.Second)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]map[string]time.Time{}
	}
	if r.seen[seq] == nil {
		r.seen[seq] = map[string]time.Time{}
	}
	if t, ok := r.seen[seq][job]; !ok || at.Before(t) {
		r.seen[seq][job] = at
	}
}

// of returns since when each of a sequence's wait Jobs that does not exist has been refused: from
// its status and from memory, the earlier.
func (r *refusals) of(seq string, prev *wavev1.Sequence, jobs []batchv1.Job, now time.Time) map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for job, at := range r.dropped[seq] {
		if now.Sub(at) > droppedTTL {
			delete(r.dropped[seq], job)
		}
	}
	if len(r.dropped[seq]) == 0 {
		delete(r.dropped, seq)
	}
	if len(r.seen[seq]) == 0 && !slices.ContainsFunc(prev.Status.Groups, func(g wavev1.GroupStatus) bool { return g.WaitJobRefusedSince != nil }) {
		return nil // nearly always: no pass pays for what no wait Job was refused
	}
	exists := jobsByKey(jobs)
	out := map[string]time.Time{}
	add := func(job string, at time.Time) {
		if _, ok := exists[job]; ok {
			return
		}
		if t, ok := out[job]; !ok || at.Before(t) {
			out[job] = at
		}
	}
	for _, g := range prev.Status.Groups {
		if g.WaitJobRefusedSince == nil || g.WaitJob == "" {
			continue
		}
		// A time rounded up to the second no later than a second after the reset was noted before
		// it (a refusal noted since is in memory, and read from there).
		if at, ok := r.dropped[seq][g.WaitJob]; ok && !g.WaitJobRefusedSince.After(at.Add(time.Second)) {
			continue
		}
		add(g.WaitJob, g.WaitJobRefusedSince.Time)
	}
	for job, at := range r.seen[seq] {
		add(job, at)
	}
	return out
}

// keepOnly forgets a sequence's refusals (in memory, in its status prev) other than those of its
// plan's refused groups: a new revision, a group no longer open (its clock starts again when it
// reopens), a Job created. A nil plan forgets them all (a frozen sequence: whether its groups stay
// open is not known).
func (r *refusals) keepOnly(seq string, plan []*Group, prev *wavev1.Sequence, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for job := range r.seen[seq] {
		if !refusedIn(plan, job) {
			r.dropLocked(seq, job, now)
		}
	}
	for _, g := range prev.Status.Groups {
		if g.WaitJobRefusedSince != nil && g.WaitJob != "" && !refusedIn(plan, g.WaitJob) {
			r.dropLocked(seq, g.WaitJob, now)
		}
	}
	if len(r.seen[seq]) == 0 {
		delete(r.seen, seq)
	}
}

// dropLocked forgets a refusal, and keeps its time from being read back from the status for
// droppedTTL.
func (r *refusals) dropLocked(seq, job string, now time.Time) {
	delete(r.seen[seq], job)
	if r.dropped == nil {
		r.dropped = map[string]map[string]time.Time{}
	}
	if r.dropped[seq] == nil {
		r.dropped[seq] = map[string]time.Time{}
	}
	r.dropped[seq][job] = now
}

func refusedIn(plan []*Group, job string) bool {
	for _, g := range plan {
		if g.JobRefused && jobKey(g) == job {
			return true
		}
	}
	return false
}

func (r *refusals) forget(seq string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, seq)
	delete(r.dropped, seq)
}

func jobKey(g *Group) string { return g.JobNamespace + "/" + g.JobName }

// planRefused is Plan, where an open group whose wait Job the API server has refused since
// refused[job] (and that has no Job) is JobRefused, and timed out once its timeout has passed
// since: a group that cannot have its Job is not waited for longer than one that has it, and its
// policy's onTimeout applies. A group released so may open the next, whose Job may be refused too:
// the plan is made again until no more groups time out. Pure, like Plan: the controller runs it on
// its cache and on the consistent read, with the same refusals.
func planRefused(seq string, members []Member, idx *policy.Index, jobs JobStates, fallbackNamespace string, refused map[string]time.Time, now time.Time) []*Group {
	plan := Plan(seq, members, idx, jobs, fallbackNamespace)
	if len(refused) == 0 {
		return plan
	}
	timedOut := map[string]bool{}
	states := func(g *Group) JobState {
		if timedOut[jobKey(g)] {
			return JobTimedOut
		}
		return jobs(g)
	}
	for more := true; more; {
		more = false
		for _, g := range plan {
			if since, ok := refused[jobKey(g)]; ok && g.Open && g.JobState == JobMissing && !now.Before(since.Add(g.Timeout)) {
				timedOut[jobKey(g)], more = true, true
			}
		}
		if more {
			plan = Plan(seq, members, idx, states, fallbackNamespace)
		}
	}
	for _, g := range plan {
		since, ok := refused[jobKey(g)]
		if !ok || !g.Open || g.JobState != JobMissing && !timedOut[jobKey(g)] {
			continue
		}
		g.JobRefused = true
		if timedOut[jobKey(g)] {
			g.Message += "; its wait Job was refused"
		} else {
			g.Message += fmt.Sprintf("; its wait Job is refused (see the Sequence's %s Events), and its timeout counts from %s",
				ReasonWaitJobRefused, since.UTC().Format(time.RFC3339))
		}
	}
	return plan
}
