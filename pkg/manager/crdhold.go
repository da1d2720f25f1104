package manager

import "time"

// crdEvent is what refreshOnCRDs hears of.
type crdEvent int

const (
	// crdChanged: a CRD changed in any way (its status included).
	crdChanged crdEvent = iota
	// crdServed: a CRD was created or deleted.
	crdServed
	// crdRespec: a CRD's spec changed (its generation: the versions or names it serves).
	crdRespec
	// crdTimer: the time crdHold.next asked for came.
	crdTimer
)

// crdHold decides when refreshOnCRDs refreshes the tracked kinds, and when it holds the sequences
// (members.Tracker.KindsChanging). A CRD created or deleted, or whose spec changed, holds them
// until the refresh made crdSettle after the CRDs' last change, and at most crdHoldMax: CRDs that
// keep changing (a controller rewriting one's status) must not hold the sequences for good. After
// a hold that ran into crdHoldMax, spec changes hold nothing for crdCooldown (two controllers
// rewriting a CRD's conversion caBundle, say); a CRD created or deleted always holds. Pure, on the
// times it is given: refreshOnCRDs runs it on the clock.
type crdHold struct {
	// again is when to refresh once more (zero: not asked for); holdMax ends the hold at the latest.
	again, holdMax time.Time
	holding        bool
	// maxedOut is when a hold last ran into crdHoldMax.
	maxedOut time.Time
}

// next is when refreshOnCRDs must come back with crdTimer without an event (zero: never).
func (h *crdHold) next() time.Time {
	switch {
	case h.again.IsZero():
		return h.holdMax
	case h.holdMax.IsZero() || h.again.Before(h.holdMax):
		return h.again
	default:
		return h.holdMax
	}
}

// on takes an event at now, and reports whether a hold begins with it. Every event is followed by
// a refresh (when the first discovery is done) and then by settled.
func (h *crdHold) on(ev crdEvent, now time.Time) (begins bool) {
	hold := func() {
		if !h.holding {
			h.holding, h.holdMax, begins = true, now.Add(crdHoldMax), true
		}
		h.again = now.Add(crdSettle)
	}
	switch ev {
	case crdServed:
		hold()
	case crdRespec:
		if !h.maxedOut.IsZero() && now.Sub(h.maxedOut) < crdCooldown {
			h.again = now.Add(crdSettle)
			break
		}
		hold()
	case crdChanged:
		h.again = now.Add(crdSettle)
	case crdTimer:
		if !h.again.IsZero() && !now.Before(h.again) {
			h.again = time.Time{}
		}
		if !h.holdMax.IsZero() && !now.Before(h.holdMax) {
			h.holdMax, h.maxedOut = time.Time{}, now
		}
	}
	return begins
}

// refresh is how the refresh after an event went.
type refresh int

const (
	// refreshMade: the tracked kinds were refreshed, and discovery serves every new CRD.
	refreshMade refresh = iota
	// refreshPending: none was made, the first discovery still running (it may have read discovery
	// before the CRD was served).
	refreshPending
	// refreshFailed: it failed, or discovery does not serve a new CRD yet.
	refreshFailed
)

// settled follows the refresh that follows an event, and reports whether the hold ends with it:
// with the refresh made crdSettle after the CRDs' last change, or at crdHoldMax. A refresh not made
// ends nothing, and another is made crdSettle later: after the first discovery always, after a
// failure while a hold waits for it (otherwise the periodic refresh of the tracked kinds will do).
func (h *crdHold) settled(r refresh, now time.Time) (ends bool) {
	if h.again.IsZero() && (r == refreshPending || r == refreshFailed && h.holding && !h.holdMax.IsZero()) {
		h.again = now.Add(crdSettle)
	}
	if h.holding && (h.again.IsZero() || h.holdMax.IsZero()) {
		h.holding, h.holdMax = false, time.Time{}
		return true
	}
	return false
}
