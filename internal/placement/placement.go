// Package placement names where people live, in the words the front and the
// supervisor share: a Route from a connection to its user's worker and epoch.
// It holds types only, so the front can read the maps without knowing how
// they are replicated.
package placement

import "errors"

// ErrDiskFull is a new session refused because the server's data
// directory is full: the maps cannot take its entry safely.
// ErrConnTaken refuses to bind a connection name another connection
// already holds (a site naming a newcomer after someone else): the
// newcomer would take that connection's person.
var ErrConnTaken = errors.New("connection name is already taken")

var ErrDiskFull = errors.New("this server's data directory is full")

// Route is where the frames of one connection go.
type Route struct {
	Conn   string
	User   string
	Worker string
	// Epoch is the user's epoch: it grows each time the user's home
	// changes, and every frame carries it.
	Epoch uint64
	// Moving is true while the user is between homes: frames wait on the
	// barrier until it drops.
	Moving bool
	// Package names the parked package the user wakes from on Worker; empty
	// once they are awake.
	Package string
}

// User states in the maps.
const (
	StateLive   = "live"
	StateMoving = "moving"
	StateParked = "parked"
)

// UserInfo is a person as the maps know them.
type UserInfo struct {
	User     string `json:"user"`
	Worker   string `json:"worker"`
	Epoch    uint64 `json:"epoch"`
	State    string `json:"state"`
	MovingTo string `json:"moving_to,omitempty"`
	Package  string `json:"package,omitempty"`
	Conns    int    `json:"conns"`
	// Seen is when a front last saw the person (unix seconds; 0: not
	// recorded yet).
	Seen int64 `json:"seen,omitempty"`
	// GatewayMicros is what the person's calls to the AI gateway cost
	// (micro-dollars) in GatewayCalls calls; both 0 without a gateway.
	GatewayMicros int64 `json:"gateway_micros,omitempty"`
	GatewayCalls  int64 `json:"gateway_calls,omitempty"`
}
