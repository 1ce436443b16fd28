package gateway

import (
	"sync"
	"time"
)

// HealthConfig says when a deployment is degraded: skipped by the router
// and probed with HealthCheck until it answers again.
type HealthConfig struct {
	// Window is how far back outcomes count (default 1 minute).
	Window time.Duration
	// MinRequests is how many outcomes the window needs before its error
	// ratio means anything (default 10).
	MinRequests int
	// MaxErrorRatio degrades a deployment whose failures reach this share
	// of its outcomes in the window (default 0.5).
	MaxErrorRatio float64
	// MaxConsecutiveTimeouts degrades a deployment after this many
	// timeouts in a row, whatever the window says (default 3).
	MaxConsecutiveTimeouts int
	// ProbeInterval is how often a degraded deployment is probed (default
	// 5 s).
	ProbeInterval time.Duration
}

func (c HealthConfig) withDefaults() HealthConfig {
	if c.Window <= 0 {
		c.Window = time.Minute
	}
	if c.MinRequests <= 0 {
		c.MinRequests = 10
	}
	if c.MaxErrorRatio <= 0 {
		c.MaxErrorRatio = 0.5
	}
	if c.MaxConsecutiveTimeouts <= 0 {
		c.MaxConsecutiveTimeouts = 3
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 5 * time.Second
	}
	return c
}

// health is one deployment's record of live outcomes.
type health struct {
	cfg HealthConfig

	mu sync.Mutex // guards the rest
	// The outcomes within the window, counted in windowBuckets slices of
	// it: the cost of an outcome does not grow with the rate (5,000 calls
	// a second keep 300,000 outcomes in a minute's window).
	buckets         [windowBuckets]bucket
	total, failures int // over the live buckets
	timeouts        int // consecutive
	cuts            int // consecutive streams failed midway
	degraded        bool
	since           time.Time // when it was degraded
	reason          string
	// trial is set from a readmission to the first outcome: a failure
	// then degrades the deployment again at once (a circuit breaker's
	// half-open state), a success ends the trial. strikes counts the
	// trials failed in a row; notBefore is the earliest readmission, the
	// probe interval doubled at each strike (at most maxProbeBackoff): a
	// deployment whose health check passes while its calls fail is not
	// readmitted over and over.
	trial     bool
	strikes   int
	notBefore time.Time
}

// maxProbeBackoff bounds how long a deployment that keeps failing its
// trials waits before its next readmission.
const maxProbeBackoff = 5 * time.Minute

// windowBuckets is how many slices of the window the outcomes are counted
// in: an outcome leaves the window within Window/windowBuckets of its
// age passing Window.
const windowBuckets = 60

// bucket counts the outcomes of one slice of time (slot numbers the
// slices since the epoch).
type bucket struct {
	slot            int64
	total, failures int
}

func (h *health) slot(now time.Time) int64 {
	return now.UnixNano() / int64(max(h.cfg.Window/windowBuckets, 1))
}

// record adds one outcome; it reports whether the deployment just became
// degraded.
func (h *health) record(now time.Time, err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	failed := err != nil && countsAgainst(err)
	h.trimLocked(now)
	b := &h.buckets[h.slot(now)%windowBuckets]
	b.slot = h.slot(now)
	b.total++
	h.total++
	if failed {
		b.failures++
		h.failures++
	}
	if err != nil && KindOf(err) == KindTimeout {
		h.timeouts++
	} else if err == nil {
		h.timeouts = 0
	}
	if h.degraded {
		return false
	}
	if h.trial && err != nil && (failed || KindOf(err) == KindQuotaExceeded) {
		h.degradeLocked(now, "failed again after its readmission")
		return true
	}
	if h.trial && err == nil {
		h.trial, h.strikes = false, 0
	}
	switch {
	case err != nil && KindOf(err) == KindQuotaExceeded:
		h.degradeLocked(now, "its account's spend limit or quota is reached")
	case h.timeouts >= h.cfg.MaxConsecutiveTimeouts:
		h.degradeLocked(now, "consecutive timeouts")
	case h.total >= h.cfg.MinRequests && float64(h.failures)/float64(h.total) >= h.cfg.MaxErrorRatio:
		h.degradeLocked(now, "error ratio over the window")
	default:
		return false
	}
	return true
}

func (h *health) degradeLocked(now time.Time, reason string) {
	if h.trial {
		h.strikes++
	} else {
		h.strikes = 0
	}
	h.degraded, h.since, h.reason, h.trial = true, now, reason, false
	h.notBefore = now.Add(min(h.cfg.ProbeInterval<<min(h.strikes, 16), maxProbeBackoff))
}

// recordCut records a stream that failed midway: a failure, and past
// MaxConsecutiveTimeouts of them in a row the deployment is degraded
// whatever the window says (a stream that breaks after its first chunk
// cannot be failed over, so waiting for the error ratio costs callers).
// It reports whether the deployment just became degraded.
func (h *health) recordCut(now time.Time, err error) bool {
	if h.record(now, err) {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cuts++
	if h.degraded || h.cuts < h.cfg.MaxConsecutiveTimeouts {
		return false
	}
	h.degradeLocked(now, "consecutive streams failed midway")
	return true
}

// streamEnded records a stream that ended well (after record).
func (h *health) streamEnded() {
	h.mu.Lock()
	h.cuts = 0
	h.mu.Unlock()
}

// trimLocked drops the buckets that left the window.
func (h *health) trimLocked(now time.Time) {
	oldest := h.slot(now) - windowBuckets
	for i := range h.buckets {
		if b := &h.buckets[i]; b.total > 0 && b.slot <= oldest {
			h.total, h.failures = h.total-b.total, h.failures-b.failures
			*b = bucket{}
		}
	}
}

// clearLocked forgets every outcome.
func (h *health) clearLocked() {
	h.buckets, h.total, h.failures = [windowBuckets]bucket{}, 0, 0
}

// readmit clears the deployment after a good probe, on trial, unless its
// backoff holds (it reports whether it readmitted).
func (h *health) readmit(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now.Before(h.notBefore) {
		return false
	}
	h.degraded, h.reason, h.timeouts, h.cuts, h.trial = false, "", 0, 0, true
	h.clearLocked()
	return true
}

// needsProbe says a degraded deployment may be readmitted at now.
func (h *health) needsProbe(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.degraded && !now.Before(h.notBefore)
}

func (h *health) isDegraded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.degraded
}

// HealthState is a deployment's health as the API shows it.
type HealthState struct {
	Degraded bool      `json:"degraded"`
	Since    time.Time `json:"since,omitzero"`
	Reason   string    `json:"reason,omitempty"`
	Requests int       `json:"requests_in_window"`
	Failures int       `json:"failures_in_window"`
}

func (h *health) state(now time.Time) HealthState {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trimLocked(now)
	return HealthState{Degraded: h.degraded, Since: h.since, Reason: h.reason, Requests: h.total, Failures: h.failures}
}

// countsAgainst reports whether an error is the deployment's failure: a
// bad request is the caller's.
func countsAgainst(err error) bool {
	// A rate limit is the provider asking to wait, not ill health.
	k := KindOf(err)
	return k != KindBadRequest && k != KindRateLimited && k != KindUnsupported
}
