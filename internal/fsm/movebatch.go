package fsm

import (
	"fmt"

	"github.com/stickyd/stickyd/internal/placement"
)

// A set of people takes the one road together: one entry raises all their
// barriers, one reassigns all of them whose freeze finished and rolls back
// the others. Each person's part is applied on its own, exactly as the
// one-person entries would apply it, and refused on its own: one person's
// refusal never undoes another's part of the same entry.

// MoveBatchRequestType carries the parts of many people's moves.
const MoveBatchRequestType MessageType = 20

// MoveBatchRequest is many people's move parts, applied in order: the
// begins, then the commits, then the aborts. A person appears at most once
// in an entry.
type MoveBatchRequest struct {
	Begin  []MoveBeginRequest  `json:"begin,omitempty"`
	Commit []MoveCommitRequest `json:"commit,omitempty"`
	Abort  []MoveAbortRequest  `json:"abort,omitempty"`
}

// MoveBatchResult is each part's outcome, in the request's order.
type MoveBatchResult struct {
	Begin  []PartResult `json:"begin,omitempty"`
	Commit []PartResult `json:"commit,omitempty"`
	Abort  []PartResult `json:"abort,omitempty"`
}

// PartResult is one person's part of a batch: their placement after it,
// or why it was refused.
type PartResult struct {
	User placement.UserInfo `json:"user"`
	// Kind and Error are the refusal (ErrorKind's word for its sentinel
	// and the message); empty when the part was applied.
	Kind  string `json:"kind,omitempty"`
	Error string `json:"error,omitempty"`
}

// Err is the part's refusal, nil if it was applied.
func (p PartResult) Err() error {
	if p.Error == "" && p.Kind == "" {
		return nil
	}
	return KindError(p.Kind, p.Error)
}

func part(u placement.UserInfo, err error) PartResult {
	if err != nil {
		return PartResult{Kind: ErrorKind(err), Error: err.Error()}
	}
	return PartResult{User: u}
}

func (f *FSM) applyMoveBatch(buf body) interface{} {
	var req MoveBatchRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding a batch of moves: %w", err)
	}
	var res MoveBatchResult
	if len(req.Begin) > 0 {
		res.Begin = make([]PartResult, len(req.Begin))
		for i, b := range req.Begin {
			res.Begin[i] = part(f.moveBeginLocked(b))
		}
	}
	if len(req.Commit) > 0 {
		res.Commit = make([]PartResult, len(req.Commit))
		for i, c := range req.Commit {
			res.Commit[i] = part(f.moveCommitLocked(c))
		}
	}
	if len(req.Abort) > 0 {
		res.Abort = make([]PartResult, len(req.Abort))
		for i, a := range req.Abort {
			res.Abort[i] = part(f.moveAbortLocked(a))
		}
	}
	return res
}
