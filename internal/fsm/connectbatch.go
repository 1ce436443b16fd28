package fsm

import (
	"encoding/json"
	"fmt"
)

// ConnectBatchRequestType binds many new connections in one entry: the
// connections a front names while the previous entry is being written go
// together (group commit), each bound exactly as a ConnectRequest would
// bind it and refused on its own.
const ConnectBatchRequestType MessageType = 25

// NewestEntryType is the newest entry type this version applies. A server
// says it (the agent's /v1/agent/self), and a writer uses an entry type
// only once every server of the cluster applies it: a rolling update's
// older servers are never sent an entry they would skip. Raise it with
// each new type.
const NewestEntryType = ConnectBatchRequestType

// ConnectBatchRequest is many connections' bindings, applied in order.
type ConnectBatchRequest struct {
	Conns []ConnectRequest `json:"conns"`
}

// ConnectBatchResult is each binding's route, or its refusal, in the
// request's order.
type ConnectBatchResult struct {
	Conns []ConnectPart `json:"conns"`
}

// ConnectPart is one binding's outcome.
type ConnectPart struct {
	Route Route `json:"route"`
	// Kind and Error are the refusal (ErrorKind's word and the
	// message); empty when the connection was bound.
	Kind  string `json:"kind,omitempty"`
	Error string `json:"error,omitempty"`
}

// Err is the part's refusal, nil if the connection was bound.
func (p ConnectPart) Err() error {
	if p.Error == "" && p.Kind == "" {
		return nil
	}
	return KindError(p.Kind, p.Error)
}

func (f *FSM) applyConnectBatch(buf []byte) interface{} {
	var req ConnectBatchRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding a batch of connections: %w", err)
	}
	out := ConnectBatchResult{Conns: make([]ConnectPart, len(req.Conns))}
	for i, c := range req.Conns {
		switch r := f.connectLocked(c).(type) {
		case Route:
			out.Conns[i] = ConnectPart{Route: r}
		case error:
			out.Conns[i] = ConnectPart{Kind: ErrorKind(r), Error: r.Error()}
		}
	}
	return out
}
