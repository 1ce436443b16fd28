package fsm

import (
	"fmt"
	"slices"
	"sort"
)

// The table subscription index: which workers have pages subscribed to
// which tables. A worker reports its whole set when it changes (its host
// writes it here), so that any agent can send a table's change to exactly
// the workers that watch it.

// TableSubsRequestType records a worker's set of subscribed tables.
const TableSubsRequestType MessageType = 13

// TableSubsRequest replaces Worker's set of tables; an empty set removes
// the worker from the index (it died, or its last subscriber left).
type TableSubsRequest struct {
	Worker string   `json:"worker"`
	Tables []string `json:"tables,omitempty"`
}

func (f *FSM) applyTableSubs(buf body) interface{} {
	var req TableSubsRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding table subscriptions: %w", err)
	}
	if req.Worker == "" {
		return fmt.Errorf("table subscriptions without a worker")
	}
	if len(req.Tables) == 0 {
		delete(f.state.Tables, req.Worker)
		return nil
	}
	if f.state.Tables == nil {
		f.state.Tables = map[string][]string{}
	}
	ts := slices.Clone(req.Tables)
	sort.Strings(ts)
	f.state.Tables[req.Worker] = slices.Compact(ts)
	return nil
}

// Subscribers lists the workers with a page subscribed to table, sorted.
func (f *FSM) Subscribers(table string) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []string
	for w, ts := range f.state.Tables {
		if _, ok := slices.BinarySearch(ts, table); ok {
			out = append(out, w)
		}
	}
	sort.Strings(out)
	return out
}

// TablesOf returns the tables a worker's pages subscribe to, sorted.
func (f *FSM) TablesOf(worker string) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.state.Tables[worker])
}
