package fsm

import (
	"fmt"
	"time"
)

// A tear-down (stickyd operator teardown) is recorded in the log before
// the leader stops the groups' Nomad jobs and empties the Consul prefix:
// from then on no leader registers a group job or publishes the placement
// registry again, whoever leads.

// TeardownRequestType records a tear-down.
const TeardownRequestType MessageType = 18

// TeardownRequest marks the cluster as being torn down since Since.
type TeardownRequest struct {
	Since time.Time `json:"since"`
}

func (f *FSM) applyTeardown(buf body) interface{} {
	var req TeardownRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding a tear-down: %w", err)
	}
	if f.state.TornDown == nil {
		f.state.TornDown = &req.Since
	}
	return nil
}

// TornDown reports whether the cluster is being torn down, and since when.
func (f *FSM) TornDown() (time.Time, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.TornDown == nil {
		return time.Time{}, false
	}
	return *f.state.TornDown, true
}
