package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// The limits of API keys and tenants: calls per minute (RPM), tokens per
// minute (TPM) and calls at once (concurrency). They are held in memory,
// on one node (a cluster's leader, through Config.Limits, wherever the
// calls run): a new leader starts its minute afresh.

// LimitError refuses a call past a key's or a tenant's limit; it is
// ErrRateLimit, and says when to retry.
type LimitError struct {
	// Message says whose limit and which.
	Message string
	// RetryAfter is when the limit lets a call through again (at least a
	// second).
	RetryAfter time.Duration
}

func (e *LimitError) Error() string { return ErrRateLimit.Error() + ": " + e.Message }

// Is makes a LimitError ErrRateLimit.
func (e *LimitError) Is(target error) bool { return target == ErrRateLimit }

// LimitScope is one holder of limits a call counts in: "key:ci",
// "tenant:acme", named in refusals by its kind ("API key", "tenant")
// and who.
type LimitScope struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Who    string `json:"who"`
	Limits Limits `json:"limits"`
}

// LimitKeeper counts calls against their keys' and tenants' limits in
// place of a router's own memory (Config.Limits): a cluster counts them in
// one place wherever the calls run.
type LimitKeeper interface {
	// Acquire admits a call counting in scopes, or refuses it with a
	// LimitError; release ends its hold on their concurrency.
	Acquire(ctx context.Context, now time.Time, scopes []LimitScope) (release func(), err error)
	// AddTokens counts n tokens in the scopes named.
	AddTokens(now time.Time, names []string, n int64)
}

// A HoldReserver is a LimitKeeper that holds a call's limits and reserves
// its worst case on the ledger in one step (a cluster's follower: one trip
// to the leader, not two). Either refusal refuses the call, and nothing
// stays held.
type HoldReserver interface {
	HoldAndReserve(ctx context.Context, now time.Time, scopes []LimitScope, r Reservation, budgets []Budget) (endLimits func(), err error)
}

// AcquireLimits admits a call counting in scopes in this router's own
// memory: the one place a cluster counts them (LimitKeeper).
func (r *Router) AcquireLimits(now time.Time, scopes []LimitScope) (release func(), err error) {
	return r.limits.acquire(now, scopes)
}

// AddLimitTokens counts n tokens in the scopes named, in this router's
// own memory.
func (r *Router) AddLimitTokens(now time.Time, names []string, n int64) {
	r.limits.addTokens(now, names, n)
}

// limiter holds the minute windows and calls at once of keys and
// tenants.
type limiter struct {
	mu    sync.Mutex // guards by and sweepAt
	by    map[string]*window
	sweep int // len(by) past which idle windows are dropped
}

// window is a holder's last minute, second by second (slot i holds the
// second sec[i]), and its calls running.
type window struct {
	inFlight int
	sec      [60]int64
	calls    [60]int64
	tokens   [60]int64
	last     int64 // the last second it was touched
}

func newLimiter() *limiter { return &limiter{by: map[string]*window{}, sweep: 1024} }

// slot returns the slot of second s, emptied if it held an older second.
func (w *window) slot(s int64) int {
	i := int(s % 60)
	if w.sec[i] != s {
		w.sec[i], w.calls[i], w.tokens[i] = s, 0, 0
	}
	w.last = max(w.last, s)
	return i
}

// over reports whether the counts of the minute before now (of calls or
// tokens) reach limit, and how long until they fall under it: a second
// s leaves the minute at s+60.
func (w *window) over(now time.Time, counts *[60]int64, limit int64) (bool, time.Duration) {
	s := now.Unix()
	var total int64
	for i := range 60 {
		if w.sec[i] > s-60 && w.sec[i] <= s {
			total += counts[i]
		}
	}
	if total < limit {
		return false, 0
	}
	for from := s - 59; from <= s; from++ {
		i := int(from % 60)
		if w.sec[i] != from {
			continue
		}
		if total -= counts[i]; total < limit {
			return true, time.Unix(from+60, 0).Sub(now)
		}
	}
	return true, 60 * time.Second
}

// acquire admits a call of scopes at now: it refuses with a LimitError
// when one of them is at its concurrency, its RPM or its TPM, else counts
// the call in each and returns what ends it (its concurrency).
func (l *limiter) acquire(now time.Time, scopes []LimitScope) (release func(), err error) {
	if len(scopes) == 0 {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ws := make([]*window, len(scopes))
	for i, sc := range scopes {
		w := l.by[sc.Name]
		if w == nil {
			w = &window{}
		}
		ws[i] = w
		lim := sc.Limits
		if lim.Concurrency > 0 && w.inFlight >= lim.Concurrency {
			return nil, &LimitError{Message: fmt.Sprintf("%s %q has %d calls running (concurrency = %d)", sc.Kind, sc.Who, w.inFlight, lim.Concurrency), RetryAfter: time.Second}
		}
		if lim.RPM > 0 {
			if over, wait := w.over(now, &w.calls, int64(lim.RPM)); over {
				return nil, &LimitError{Message: fmt.Sprintf("%s %q made %d calls in the last minute (rpm = %d)", sc.Kind, sc.Who, lim.RPM, lim.RPM), RetryAfter: retryAfter(wait)}
			}
		}
		if lim.TPM > 0 {
			if over, wait := w.over(now, &w.tokens, lim.TPM); over {
				return nil, &LimitError{Message: fmt.Sprintf("%s %q used its tokens of the last minute (tpm = %d)", sc.Kind, sc.Who, lim.TPM), RetryAfter: retryAfter(wait)}
			}
		}
	}
	s := now.Unix()
	for i, sc := range scopes {
		w := ws[i]
		l.by[sc.Name] = w
		w.inFlight++
		w.calls[w.slot(s)]++
	}
	l.sweepLocked(s)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, w := range ws {
			w.inFlight--
		}
	}, nil
}

// addTokens counts n tokens of a call that ended at now in the windows
// of names.
func (l *limiter) addTokens(now time.Time, names []string, n int64) {
	if len(names) == 0 || n == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, name := range names {
		if w := l.by[name]; w != nil {
			w.tokens[w.slot(now.Unix())] += n
		}
	}
}

// sweepLocked drops the windows idle for a minute once there are many.
func (l *limiter) sweepLocked(now int64) {
	if len(l.by) <= l.sweep {
		return
	}
	for name, w := range l.by {
		if w.inFlight == 0 && w.last < now-60 {
			delete(l.by, name)
		}
	}
	l.sweep = max(1024, 2*len(l.by))
}

// retryAfter is a wait rounded up to whole seconds, at least one (what
// Retry-After can say).
func retryAfter(d time.Duration) time.Duration {
	return max(time.Second, (d+time.Second-1)/time.Second*time.Second)
}
