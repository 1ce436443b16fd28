package client

import "context"

// Status is the agent's view of the cluster (GET /v1/status): it may lag
// the leader's.
type Status struct {
	Name    string   `json:"name"`
	Leader  string   `json:"leader"`
	Members []Peer   `json:"members"`
	Workers []Worker `json:"workers"`
	Users   int      `json:"users"`
	Conns   int      `json:"connections"`
	Index   uint64   `json:"applied_index"`
	// Term is raft's current term: it grows at every election.
	Term uint64 `json:"term"`
}

// Peer is a member of the raft configuration.
type Peer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
}

// Status returns the agent's view of the cluster (GET /v1/status).
func (c *Client) Status(ctx context.Context, opts ...CallOption) (Status, error) {
	var st Status
	err := c.get(ctx, "/v1/status", nil, &st, opts)
	return st, err
}
