package fsm

import (
	"fmt"
)

// ConnectBatchRequestType binds many new connections in one entry: the
// connections a front names while the previous entry is being written go
// together (group commit), each bound exactly as a ConnectRequest would
// bind it and refused on its own.
const ConnectBatchRequestType MessageType = 25

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

func (f *FSM) applyConnectBatch(buf body) interface{} {
	var req ConnectBatchRequest
	if err := buf.decode(&req); err != nil {
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
