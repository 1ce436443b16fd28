package store

import (
	"encoding/json"
	"fmt"
	"time"
)

// Op is one operation as a value, for callers that log operations (the FSM
// may use these as log entry bodies: their JSON form is stable) and for
// replaying them. Apply runs it. The Op types are the values AcquireOp,
// CommitOp, ReleaseOp, ReleaseWorkerOp, ReleaseUserOp and ExpireOp; pointers
// to them are refused.
type Op interface{ isOp() }

// AcquireOp is Store.Acquire.
type AcquireOp struct {
	ID    uint64        `json:"id"`
	Owner Owner         `json:"owner"`
	Paths []string      `json:"paths"`
	Lease time.Duration `json:"lease"`
	Now   int64         `json:"now"`
}

// CommitOp is Store.Commit.
type CommitOp struct {
	ID     uint64                     `json:"id"`
	Token  uint64                     `json:"token"`
	Set    map[string]json.RawMessage `json:"set,omitempty"`
	Delete []string                   `json:"delete,omitempty"`
	Now    int64                      `json:"now"`
}

// ReleaseOp is Store.Release.
type ReleaseOp struct {
	ID  uint64 `json:"id"`
	Now int64  `json:"now"`
}

// ReleaseWorkerOp is Store.ReleaseWorker.
type ReleaseWorkerOp struct {
	Worker string `json:"worker"`
	Now    int64  `json:"now"`
}

// ReleaseUserOp is Store.ReleaseUser.
type ReleaseUserOp struct {
	Worker string `json:"worker"`
	User   string `json:"user"`
	Now    int64  `json:"now"`
}

// ExpireOp is Store.Expire.
type ExpireOp struct {
	Now int64 `json:"now"`
}

func (AcquireOp) isOp()       {}
func (CommitOp) isOp()        {}
func (ReleaseOp) isOp()       {}
func (ReleaseWorkerOp) isOp() {}
func (ReleaseUserOp) isOp()   {}
func (ExpireOp) isOp()        {}

// Apply runs op. It fails with ErrBadOp for an op of another type, or with
// whatever the operation's method returns.
func (s *Store) Apply(op Op) (Result, error) {
	switch o := op.(type) {
	case AcquireOp:
		return s.Acquire(o.ID, o.Owner, o.Paths, o.Lease, o.Now)
	case CommitOp:
		return s.Commit(o.ID, o.Token, o.Set, o.Delete, o.Now)
	case ReleaseOp:
		return s.Release(o.ID, o.Now)
	case ReleaseWorkerOp:
		return s.ReleaseWorker(o.Worker, o.Now), nil
	case ReleaseUserOp:
		return s.ReleaseUser(o.Worker, o.User, o.Now), nil
	case ExpireOp:
		return s.Expire(o.Now), nil
	}
	return Result{}, fmt.Errorf("applying %T: %w", op, ErrBadOp)
}
