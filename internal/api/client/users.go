package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// A person's state in the placement maps (User.State).
const (
	UserLive   = "live"
	UserMoving = "moving"
	UserParked = "parked"
)

// How many people a page of GET /v1/users (and the monitor's reading)
// holds: DefaultPageLimit unless asked, at most MaxPageLimit.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// User is a person as the placement maps hold them (GET /v1/users/{user},
// and each of a UsersPage).
type User struct {
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

// UsersPage is one page of people, by name; Next is the cursor of the page
// after it, empty after the last.
type UsersPage struct {
	Users []User `json:"users"`
	Next  string `json:"next,omitempty"`
}

// UsersQuery selects the people of GET /v1/users. Empty fields select
// everyone; Limit 0 is the agent's DefaultPageLimit.
type UsersQuery struct {
	Worker, Group, State string
	// Cursor starts after the page that gave it (UsersPage.Next).
	Cursor string
	Limit  int
}

// UserTally counts the people without listing them: by state, by worker
// and by group.
type UserTally struct {
	Users   int            `json:"users"`
	Conns   int            `json:"conns"`
	State   map[string]int `json:"state"`
	Workers map[string]int `json:"workers"`
	Groups  map[string]int `json:"groups"`
}

// MoveRequest is the body of POST /v1/users/{user}/move: exactly one of To
// (a worker) and Group.
type MoveRequest struct {
	To    string `json:"to,omitempty"`
	Group string `json:"group,omitempty"`
}

// A move's outcome (Move.Outcome).
const (
	MoveMoved      = "moved"
	MoveRolledBack = "rolled_back"
	MoveStateLost  = "state_lost"
	MoveFailed     = "failed"
)

// Move is what a move did: a user move's answer, and each move of a drain
// or a job.
type Move struct {
	User    string `json:"user"`
	From    string `json:"from"`
	To      string `json:"to"`
	Epoch   uint64 `json:"epoch"`
	Outcome string `json:"outcome"`
	Bytes   int    `json:"bytes"`
	// Precopied is the size of the copy sent ahead of the freeze, and
	// FromBase the pages the freeze then sent as their changes alone.
	Precopied int    `json:"precopied_bytes,omitempty"`
	FromBase  int    `json:"from_base_pages,omitempty"`
	Conns     int    `json:"conns"`
	Pages     int    `json:"pages"`
	Package   string `json:"package,omitempty"`
	// Freeze is how long the old worker took to hand the person over;
	// Duration runs from barrier up to reassignment.
	Freeze   time.Duration `json:"freeze_ns"`
	Duration time.Duration `json:"duration_ns"`
}

// Forgotten is what forgetting a person removed.
type Forgotten struct {
	User   string `json:"user"`
	Worker string `json:"worker"`
	Conns  int    `json:"conns"`
	// Package is the parked package that was deleted with them, if any.
	Package string `json:"package,omitempty"`
}

// Users returns one page of the people q selects (GET /v1/users). A bad
// query is the API's 400.
func (c *Client) Users(ctx context.Context, q UsersQuery, opts ...CallOption) (UsersPage, error) {
	query := url.Values{}
	if q.Limit != 0 {
		query.Set("limit", strconv.Itoa(q.Limit))
	}
	for k, v := range map[string]string{"worker": q.Worker, "group": q.Group, "state": q.State, "cursor": q.Cursor} {
		if v != "" {
			query.Set(k, v)
		}
	}
	var p UsersPage
	err := c.get(ctx, "/v1/users", query, &p, opts)
	return p, err
}

// User returns one person (GET /v1/users/{user}); one the maps do not hold
// is the API's 404.
func (c *Client) User(ctx context.Context, user string, opts ...CallOption) (User, error) {
	var u User
	err := c.get(ctx, "/v1/users/"+url.PathEscape(user), nil, &u, opts)
	return u, err
}

// Tally counts the people by state, worker and group (GET /v1/tally).
func (c *Client) Tally(ctx context.Context, opts ...CallOption) (UserTally, error) {
	var t UserTally
	err := c.get(ctx, "/v1/tally", nil, &t, opts)
	return t, err
}

// MoveUser moves a person to a worker or a group (POST
// /v1/users/{user}/move) and returns what the move did. A move rolled back
// or refused is the API's error (404 unknown user, worker or group; 400 a
// destination that cannot take people; 409 busy or rolled back).
func (c *Client) MoveUser(ctx context.Context, user string, req MoveRequest, opts ...CallOption) (Move, error) {
	var m Move
	err := c.decode(ctx, http.MethodPost, "/v1/users/"+url.PathEscape(user)+"/move", nil, req, &m, opts)
	return m, err
}

// ForgetUser forgets a person at once (POST /v1/users/{user}/forget): 404
// for one the maps do not hold, 409 for one who is moving.
func (c *Client) ForgetUser(ctx context.Context, user string, opts ...CallOption) (Forgotten, error) {
	var f Forgotten
	err := c.decode(ctx, http.MethodPost, "/v1/users/"+url.PathEscape(user)+"/forget", nil, nil, &f, opts)
	return f, err
}
