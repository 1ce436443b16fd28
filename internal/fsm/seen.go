package fsm

import (
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

func (f *FSM) applySeenUsers(buf body) interface{} {
	var req SeenUsersRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding seen users: %w", err)
	}
	var out SeenUsersResult
	for _, user := range req.Users {
		if h, ok := f.state.Users.get(user); ok && h.Seen < req.At {
			h.Seen = req.At
			f.state.Users.put(user, h)
			out.Stamped++
		}
	}
	for _, conn := range req.Conns {
		c, ok := f.state.Conns.get(conn)
		if !ok || c.Seen >= req.At {
			continue
		}
		c.Seen = req.At
		f.state.Conns.put(conn, c)
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

func (f *FSM) applyForgetConns(buf body) interface{} {
	var req ForgetConnsRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding forget conns: %w", err)
	}
	var out ForgetConnsResult
	for _, fc := range req.Conns {
		h, found := f.state.Users.get(fc.User)
		c, _ := f.state.Conns.get(fc.Conn)
		switch {
		case c.User != fc.User || !found,
			h.State != "" && h.State != placement.StateLive,
			h.Conns <= 1,
			c.Seen == 0 || c.Seen >= req.Before:
			out.Kept++
			continue
		}
		f.state.Conns.del(fc.Conn)
		h.Conns--
		f.state.Users.put(fc.User, h)
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
	// The newest connection of each person is theirs to keep.
	type conn struct {
		name string
		seen int64
	}
	newest := map[string]conn{}
	// A chunk at a time, the lock released between (walkUsers): the
	// entry that forgets them checks each connection again.
	walk(f, func(s *State) *shardMap[connRec] { return s.Conns.m }, func(name string, c connRec) {
		// Under the lock (walk): the connection's person is in the map.
		user, h := f.state.Users.m.at(c.user)
		if h.ghost() || !workers[h.worker] || h.state() != placement.StateLive || h.conns <= 1 {
			return
		}
		seen := int64(c.seen)
		if seen == 0 {
			unstamped = append(unstamped, name)
			return
		}
		if n, ok := newest[user]; !ok || n.seen < seen {
			newest[user] = conn{name, seen}
		}
		if seen < before {
			stale = append(stale, ForgetConn{Conn: name, User: user})
		}
	})
	keep := stale[:0]
	for _, fc := range stale {
		if newest[fc.User].name != fc.Conn {
			keep = append(keep, fc)
		}
	}
	return keep, unstamped
}
