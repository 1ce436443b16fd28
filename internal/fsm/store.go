package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/stickyd/stickyd/internal/store"
)

// The global store (internal/store) lives in the maps: every acquire,
// commit and release is a log entry, so the leader is its single writer and
// every server holds a replica. Grant ids are the raft index of the acquire.

// StoreOpRequestType carries one store operation (StoreOpRequest).
const StoreOpRequestType MessageType = 14

// Store operation kinds.
const (
	StoreAcquire       = "acquire"
	StoreCommit        = "commit"
	StoreRelease       = "release"
	StoreReleaseWorker = "release-worker"
	StoreExpire        = "expire"
)

// StoreOpRequest is one operation of the store: Kind names it, Op is the
// matching store op (store.AcquireOp, CommitOp, ReleaseOp, ReleaseWorkerOp
// or ExpireOp) in JSON. An acquire's ID is set by the FSM to the entry's
// index.
type StoreOpRequest struct {
	Kind string          `json:"kind"`
	Op   json.RawMessage `json:"op"`
}

// StoreResult is what a store operation did: the grant it concerns (an
// acquire's new id) and what changed.
type StoreResult struct {
	ID     uint64       `json:"id"`
	Result store.Result `json:"result"`
}

// EncodeStoreOp builds the log entry of a store operation.
func EncodeStoreOp(kind string, op any) ([]byte, error) {
	b, err := json.Marshal(op)
	if err != nil {
		return nil, err
	}
	return Encode(StoreOpRequestType, StoreOpRequest{Kind: kind, Op: b})
}

func (f *FSM) applyStoreOp(buf body, index uint64) interface{} {
	var req StoreOpRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding store operation: %w", err)
	}
	if f.state.Store == nil {
		f.state.Store = store.New()
	}
	st := f.state.Store
	var (
		id  uint64
		res store.Result
		err error
	)
	switch req.Kind {
	case StoreAcquire:
		var op store.AcquireOp
		if err = json.Unmarshal(req.Op, &op); err == nil {
			id = index
			res, err = st.Acquire(index, op.Owner, op.Paths, op.Lease, op.Now)
		}
	case StoreCommit:
		var op store.CommitOp
		if err = json.Unmarshal(req.Op, &op); err == nil {
			id = op.ID
			res, err = st.Commit(op.ID, op.Token, op.Set, op.Delete, op.Now)
		}
	case StoreRelease:
		var op store.ReleaseOp
		if err = json.Unmarshal(req.Op, &op); err == nil {
			id = op.ID
			res, err = st.Release(op.ID, op.Now)
		}
	case StoreReleaseWorker:
		var op store.ReleaseWorkerOp
		if err = json.Unmarshal(req.Op, &op); err == nil {
			res = st.ReleaseWorker(op.Worker, op.Now)
		}
	case StoreExpire:
		var op store.ExpireOp
		if err = json.Unmarshal(req.Op, &op); err == nil {
			res = st.Expire(op.Now)
		}
	default:
		return fmt.Errorf("unknown store operation %q", req.Kind)
	}
	if err != nil {
		return fmt.Errorf("store %s: %w", req.Kind, err)
	}
	f.grantsChangedLocked(res)
	return StoreResult{ID: id, Result: res}
}

// releaseMovedLocked ends the grants a person held on the worker they were
// moved away from (on any of its incarnations).
func (f *FSM) releaseMovedLocked(user, from string, now int64) {
	st := f.state.Store
	if st == nil {
		return
	}
	seen := map[string]bool{}
	for _, g := range st.Grants() {
		w := g.Owner.Worker
		if g.Owner.User != user || seen[w] || (w != from && !strings.HasPrefix(w, from+"#")) {
			continue
		}
		seen[w] = true
		f.grantsChangedLocked(st.ReleaseUser(w, user, now))
	}
}

// grantsChangedLocked wakes the watchers of every grant res granted or
// ended.
func (f *FSM) grantsChangedLocked(res store.Result) {
	touch := func(id uint64) {
		if ch := f.grantWatch[id]; ch != nil {
			close(ch)
			delete(f.grantWatch, id)
		}
	}
	for _, g := range res.Granted {
		touch(g.ID)
	}
	for _, e := range res.Ended {
		touch(e.ID)
	}
}

// WatchGrant returns a channel closed at the next change of grant id (it is
// granted, or it ends).
func (f *FSM) WatchGrant(id uint64) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.grantWatch == nil {
		f.grantWatch = map[uint64]chan struct{}{}
	}
	ch := f.grantWatch[id]
	if ch == nil {
		ch = make(chan struct{})
		f.grantWatch[id] = ch
	}
	return ch
}

// Grant looks a grant up in the replica (with its content when held).
func (f *FSM) Grant(id uint64) (store.GrantInfo, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Store == nil {
		return store.GrantInfo{}, false
	}
	return f.state.Store.Grant(id)
}

// StoreGet reads the replica of the store: every value at or under paths.
func (f *FSM) StoreGet(paths []string) (map[string]json.RawMessage, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Store == nil {
		if _, err := store.New().Get(paths); err != nil {
			return nil, err
		}
		return map[string]json.RawMessage{}, nil
	}
	return f.state.Store.Get(paths)
}

// NextExpiry is when the first held grant's lease ends (unix nanoseconds),
// 0 when none is held.
func (f *FSM) NextExpiry() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Store == nil {
		return 0
	}
	return f.state.Store.NextExpiry()
}

// GrantsOf lists the grants (held and waiting) whose owner's worker starts
// with prefix.
func (f *FSM) GrantsOf(prefix string) []store.GrantInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Store == nil {
		return nil
	}
	var out []store.GrantInfo
	for _, g := range f.state.Store.Grants() {
		if strings.HasPrefix(g.Owner.Worker, prefix) {
			out = append(out, g)
		}
	}
	return out
}

// IsStale reports a store error that means the grant is no longer held.
func IsStale(err error) bool { return errors.Is(err, store.ErrStaleGrant) }
