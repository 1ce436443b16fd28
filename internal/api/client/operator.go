package client

import (
	"context"
	"io"
	"net/http"
)

// Keyring is the cluster's cookie key ring (GET /v1/operator/keyring): the
// keys' ids, the first signing, every one verifying. Keys themselves never
// leave the maps.
type Keyring struct {
	Keys []KeyringKey `json:"keys"`
	// Source is where the ring came from (generated, files); Index the log
	// index that installed it.
	Source string `json:"source"`
	Index  uint64 `json:"index"`
	// Files are the ids of the asked server's cookie key files, if any.
	Files []string `json:"files,omitempty"`
}

// KeyringKey is one key of the ring.
type KeyringKey struct {
	ID    string `json:"id"`
	Signs bool   `json:"signs"`
}

// LeaderTransfer is the answer of POST /v1/operator/raft/transfer-leader:
// the server that led and the one that leads now.
type LeaderTransfer struct {
	From   string `json:"from"`
	Leader string `json:"leader"`
}

// TeardownStep is one line of a tear-down's stream: a step done, then a
// last line with Done set, or with Error set if it stopped.
type TeardownStep struct {
	Step   string `json:"step"`
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
	Done   bool   `json:"done,omitempty"`
}

// Keyring returns the cookie key ring (GET /v1/operator/keyring).
func (c *Client) Keyring(ctx context.Context, opts ...CallOption) (Keyring, error) {
	var k Keyring
	err := c.get(ctx, "/v1/operator/keyring", nil, &k, opts)
	return k, err
}

// RotateKeyring has the leader put a new key first (POST
// /v1/operator/keyring/rotate) and returns the ring; dropOld keeps no
// earlier key. A ring from the servers' key files is refused.
func (c *Client) RotateKeyring(ctx context.Context, dropOld bool, opts ...CallOption) (Keyring, error) {
	var k Keyring
	err := c.decode(ctx, http.MethodPost, "/v1/operator/keyring/rotate", nil, map[string]bool{"drop_old": dropOld}, &k, opts)
	return k, err
}

// RemovePeer removes the raft peer id, a server gone for good, from the
// configuration (POST /v1/operator/raft/remove-peer). The leader is
// refused (409), an unknown peer is the API's 404.
func (c *Client) RemovePeer(ctx context.Context, id string) error {
	return c.decode(ctx, http.MethodPost, "/v1/operator/raft/remove-peer", nil, map[string]string{"id": id}, nil, nil)
}

// TransferLeader asks the leader to hand leadership to the voter id (""
// for the most up-to-date other voter) and waits until it has (POST
// /v1/operator/raft/transfer-leader). An unknown id is the API's 404, a
// non-voter its 409.
func (c *Client) TransferLeader(ctx context.Context, id string, opts ...CallOption) (LeaderTransfer, error) {
	var t LeaderTransfer
	var body any
	if id != "" {
		body = map[string]string{"id": id}
	}
	err := c.decode(ctx, http.MethodPost, "/v1/operator/raft/transfer-leader", nil, body, &t, opts)
	return t, err
}

// Teardown has the leader take a Nomad deployment apart (POST
// /v1/operator/teardown) and streams its steps. A stream that ends without
// a line with Done or Error set was cut short.
func (c *Client) Teardown(ctx context.Context) (*Stream[TeardownStep], error) {
	body, err := c.open(ctx, http.MethodPost, "/v1/operator/teardown", nil)
	if err != nil {
		return nil, err
	}
	return newLineStream[TeardownStep](body), nil
}

// Snapshot returns a raft snapshot of the maps as the asked server holds
// them (GET /v1/operator/snapshot), to read as it comes; the caller closes
// it. The read token may not take one: it holds the cookie keys.
func (c *Client) Snapshot(ctx context.Context) (io.ReadCloser, error) {
	return c.open(ctx, http.MethodGet, "/v1/operator/snapshot", nil)
}
