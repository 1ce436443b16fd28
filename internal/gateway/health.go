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

	mu       sync.Mutex // guards the rest
	outcomes []outcome  // within the window, oldest first
	timeouts int        // consecutive
	degraded bool
	since    time.Time // when it was degraded
	reason   string
}

type outcome struct {
	at     time.Time
	failed bool
}

// record adds one outcome; it reports whether the deployment just became
// degraded.
func (h *health) record(now time.Time, err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	failed := err != nil && countsAgainst(err)
	h.outcomes = append(h.outcomes, outcome{at: now, failed: failed})
	h.trimLocked(now)
	if err != nil && KindOf(err) == KindTimeout {
		h.timeouts++
	} else if err == nil {
		h.timeouts = 0
	}
	if h.degraded {
		return false
	}
	var fails int
	for _, o := range h.outcomes {
		if o.failed {
			fails++
		}
	}
	switch {
	case err != nil && KindOf(err) == KindQuotaExceeded:
		h.degradeLocked(now, "its account's spend limit or quota is reached")
	case h.timeouts >= h.cfg.MaxConsecutiveTimeouts:
		h.degradeLocked(now, "consecutive timeouts")
	case len(h.outcomes) >= h.cfg.MinRequests && float64(fails)/float64(len(h.outcomes)) >= h.cfg.MaxErrorRatio:
		h.degradeLocked(now, "error ratio over the window")
	default:
		return false
	}
	return true
}

func (h *health) degradeLocked(now time.Time, reason string) {
	h.degraded, h.since, h.reason = true, now, reason
}

func (h *health) trimLocked(now time.Time) {
	cut := 0
	for cut < len(h.outcomes) && now.Sub(h.outcomes[cut].at) > h.cfg.Window {
		cut++
	}
	h.outcomes = h.outcomes[cut:]
}

// readmit clears the deployment after a good probe.
func (h *health) readmit() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.degraded, h.reason, h.outcomes, h.timeouts = false, "", nil, 0
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
	s := HealthState{Degraded: h.degraded, Since: h.since, Reason: h.reason, Requests: len(h.outcomes)}
	for _, o := range h.outcomes {
		if o.failed {
			s.Failures++
		}
	}
	return s
}

// countsAgainst reports whether an error is the deployment's failure: a
// bad request is the caller's.
func countsAgainst(err error) bool {
	// A rate limit is the provider asking to wait, not ill health.
	k := KindOf(err)
	return k != KindBadRequest && k != KindRateLimited
}
