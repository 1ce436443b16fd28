package fsm

import (
	"encoding/json"
	"fmt"

	"github.com/stickyd/stickyd/internal/placement"
)

// SeenUsersRequestType records when people and their connections were last
// seen, many in one entry (lifecycle.forget_after forgets those not seen
// for that long).
const SeenUsersRequestType MessageType = 22

// ForgetConnsRequestType removes many connections not seen for a while
// from people who are still seen on another.
const ForgetConnsRequestType MessageType = 23

// SeenUsersRequest says each of Users, and each of Conns, was seen at At
// (unix seconds). A time earlier than the one recorded changes nothing; a
// person or a connection the maps do not hold is skipped.
type SeenUsersRequest struct {
	At    int64    `json:"at"`
	Users []string `json:"users"`
	Conns []string `json:"conns,omitempty"`
}

// SeenUsersResult counts the people and the connections whose time the
// entry moved on.
type SeenUsersResult struct {
	Stamped      int `json:"stamped"`
	ConnsStamped int `json:"conns_stamped,omitempty"`
}

func (f *FSM) applySeenUsers(buf []byte) interface{} {
	var req SeenUsersRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding seen users: %w", err)
	}
	var out SeenUsersResult
	for _, user := range req.Users {
		if h := f.state.Users[user]; h != nil && h.Seen < req.At {
			h.Seen = req.At
			out.Stamped++
		}
	}
	for _, conn := range req.Conns {
		if _, ok := f.state.Conns[conn]; !ok || f.state.ConnSeen[conn] >= req.At {
			continue
		}
		if f.state.ConnSeen == nil {
			f.state.ConnSeen = map[string]int64{}
		}
		f.state.ConnSeen[conn] = req.At
		out.ConnsStamped++
	}
	return out
}

// ForgetConn names a connection to forget and the person it must still
// belong to.
type ForgetConn struct {
	Conn string `json:"conn"`
	User string `json:"user"`
}

// ForgetConnsRequest removes each of Conns still bound to its User and last
// seen before Before (unix seconds), as long as the person is live and keeps
// another connection: the last connection of a person goes with the person
// (ForgetUsers), and a connection seen since it was chosen stays.
type ForgetConnsRequest struct {
	Before int64        `json:"before"`
	Conns  []ForgetConn `json:"conns"`
}

// ForgetConnsResult lists the connections removed, each with the worker
// that holds its person (who must let it go).
type ForgetConnsResult struct {
	Forgotten []ForgottenConn `json:"forgotten"`
	Kept      int             `json:"kept"`
}

// ForgottenConn is a connection the entry removed.
type ForgottenConn struct {
	Conn   string `json:"conn"`
	User   string `json:"user"`
	Worker string `json:"worker"`
}

func (f *FSM) applyForgetConns(buf []byte) interface{} {
	var req ForgetConnsRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding forget conns: %w", err)
	}
	var out ForgetConnsResult
	for _, fc := range req.Conns {
		h := f.state.Users[fc.User]
		seen, stamped := f.state.ConnSeen[fc.Conn]
		switch {
		case f.state.Conns[fc.Conn] != fc.User || h == nil,
			h.State != "" && h.State != placement.StateLive,
			h.Conns <= 1,
			!stamped || seen >= req.Before:
			out.Kept++
			continue
		}
		delete(f.state.Conns, fc.Conn)
		delete(f.state.ConnSeen, fc.Conn)
		h.Conns--
		f.touchLocked(fc.User)
		out.Forgotten = append(out.Forgotten, ForgottenConn{Conn: fc.Conn, User: fc.User, Worker: h.Worker})
	}
	return out
}

// StaleConns returns the connections of live people homed on workers that
// no front has seen since before (unix seconds), leaving out each person's
// most recently seen connection; and the connections of those people that
// were never stamped (to be stamped now). It reads every connection once.
func (f *FSM) StaleConns(workers map[string]bool, before int64) (stale []ForgetConn, unstamped []string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	// The newest connection of each person is theirs to keep.
	newest := map[string]string{}
	for conn, user := range f.state.Conns {
		h := f.state.Users[user]
		if h == nil || !workers[h.Worker] || h.State != "" && h.State != placement.StateLive || h.Conns <= 1 {
			continue
		}
		seen, ok := f.state.ConnSeen[conn]
		if !ok {
			unstamped = append(unstamped, conn)
			continue
		}
		if n, ok := newest[user]; !ok || f.state.ConnSeen[n] < seen {
			newest[user] = conn
		}
		if seen < before {
			stale = append(stale, ForgetConn{Conn: conn, User: user})
		}
	}
	keep := stale[:0]
	for _, fc := range stale {
		if newest[fc.User] != fc.Conn {
			keep = append(keep, fc)
		}
	}
	return keep, unstamped
}
