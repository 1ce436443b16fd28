package store

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Owner is who asked for a grant. Worker names one incarnation of a worker
// process ("web-1#3"), so a relaunched worker never inherits grants; User is
// the person on whose behalf it asked, empty for the worker's own requests.
type Owner struct {
	Worker string `json:"worker"`
	User   string `json:"user,omitempty"`
}

func (o Owner) check() error {
	if o.Worker == "" {
		return fmt.Errorf("%w: empty worker", ErrBadOwner)
	}
	if len(o.Worker) > MaxNameBytes || len(o.User) > MaxNameBytes {
		return fmt.Errorf("%w: name longer than %d bytes", ErrBadOwner, MaxNameBytes)
	}
	return nil
}

// GrantState says whether a grant is waiting in the queue or held.
type GrantState string

// Grant states.
const (
	StateWaiting GrantState = "waiting"
	StateHeld    GrantState = "held"
)

// GrantInfo is a grant as callers see it. Times are unix nanoseconds.
type GrantInfo struct {
	ID    uint64        `json:"id"`
	Owner Owner         `json:"owner"`
	Paths []string      `json:"paths"` // sorted, minimal: none lies under another
	Lease time.Duration `json:"lease"`
	State GrantState    `json:"state"`
	// Token is the fencing token a commit must present; 0 while waiting.
	Token       uint64 `json:"token,omitempty"`
	RequestedAt int64  `json:"requested_at"`
	// GrantedAt and ExpiresAt are 0 while waiting.
	GrantedAt int64 `json:"granted_at,omitempty"`
	ExpiresAt int64 `json:"expires_at,omitempty"`
	// Position is the 1-based place among the waiting requests; 0 when held.
	Position int `json:"position,omitempty"`
	// Content holds every entry at or under Paths as of the grant: filled
	// for a held grant by Store.Grant and in Result.Granted, nil otherwise.
	// It may be empty: nothing is stored there yet.
	Content map[string]json.RawMessage `json:"content,omitempty"`
}

// EndReason says why a grant or a request ended.
type EndReason string

// End reasons.
const (
	EndCommitted  EndReason = "committed"   // its commit applied
	EndReleased   EndReason = "released"    // its holder released it without writes
	EndCancelled  EndReason = "cancelled"   // released while still waiting
	EndExpired    EndReason = "expired"     // its lease ran out (Expire)
	EndWorkerGone EndReason = "worker-gone" // ReleaseWorker of its owner's worker
	EndUserGone   EndReason = "user-gone"   // ReleaseUser of its owner
)

// Ended reports a grant or request that ended. Token is 0 if it was still
// waiting.
type Ended struct {
	ID     uint64    `json:"id"`
	Owner  Owner     `json:"owner"`
	Token  uint64    `json:"token,omitempty"`
	Reason EndReason `json:"reason"`
}

// Result is what an operation changed, for the watchers: the grants it gave
// (in the order given, with their content), the grants and requests it ended
// (in id order within each cause), and the paths a commit wrote (sorted).
type Result struct {
	Granted []GrantInfo `json:"granted,omitempty"`
	Ended   []Ended     `json:"ended,omitempty"`
	Written []string    `json:"written,omitempty"`
}

// grant is the stored form of a grant or a waiting request.
type grant struct {
	id          uint64
	owner       Owner
	paths       []string // normalised; shared, never modified
	lease       time.Duration
	requestedAt int64
	grantedAt   int64  // 0 while waiting
	token       uint64 // 0 while waiting
}

func (g *grant) held() bool { return g.token != 0 }

// expiresAt is granted-at + lease, saturating; 0 while waiting.
func (g *grant) expiresAt() int64 {
	if !g.held() {
		return 0
	}
	if g.grantedAt > math.MaxInt64-int64(g.lease) {
		return math.MaxInt64
	}
	return g.grantedAt + int64(g.lease)
}

func checkLease(d time.Duration) error {
	if d <= 0 || d > MaxLease {
		return fmt.Errorf("%w: %v, want (0, %v]", ErrBadLease, d, MaxLease)
	}
	return nil
}
