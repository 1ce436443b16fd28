// Package store is the global shared store as a deterministic state machine:
// one JSON tree common to every worker, and the ordered, all-or-nothing
// grants through which workers read-modify-write it.
//
// The store owns the tree, the held grants, the FIFO queue of waiting
// requests, the fencing-token counter and the store's clock. It is meant to
// be embedded in the supervisor's Raft FSM (internal/fsm), which feeds it
// the same operations in the same order on every server. It must never do IO,
// start goroutines, read the wall clock or iterate a map in an order that
// shows: the same operations in the same order give byte-identical state
// everywhere. Bad input returns an error and leaves the store unchanged; it
// never panics.
//
// # The tree
//
// A value is addressed by a slash-separated path ("customers/42/name"): 1 to
// MaxPathBytes bytes, at most MaxSegments segments, each segment made of
// [A-Za-z0-9._~-] and neither "." nor "..". The tree is stored as a flat set
// of entries, path → JSON value, in which no entry lies under another:
//
//   - Writing a JSON object at P explodes it: each member k is written at
//     P/k, recursively, so setting "customers/42" to {"name":"Ada"} stores
//     the entry "customers/42/name" = "Ada", and reading "customers/42/name"
//     finds it. An empty object, an object with a key that is not a valid
//     segment, or one whose members would break the path limits is stored
//     whole, as one opaque entry. Arrays, strings, numbers, booleans and null
//     are stored whole.
//   - Writing at P first deletes P and everything under P: a set replaces
//     the whole subtree.
//   - Writing under an entry that is not an object (P/x where P holds 5, or
//     an opaque object) is an error, ErrNotObject, unless the same commit
//     deletes that entry. An entry holding {} is replaced silently: the empty
//     object gains a member.
//   - Deleting P removes P and everything under P. Deleting the last member
//     of an object leaves nothing (not {}).
//   - Reading P returns every entry at or under P (Get), keyed by full path.
//     Assemble rebuilds one JSON document from such entries.
//
// Values are kept canonical: compact, with <, > and & escaped as encoding/json
// writes them. A value read back is the same JSON, not always the same bytes.
//
// # Grants
//
// Every write goes through a grant: a request for a set of paths, granted all
// at once or not at all. Two path sets conflict when a path of one equals, or
// is a segment prefix of, a path of the other ("a" and "a/b" conflict, "a/b"
// and "a/bc" do not). A request is granted as soon as it conflicts with no
// held grant and with no earlier request still waiting; so a request never
// overtakes an earlier conflicting one (nobody starves), while a request that
// conflicts with nothing may pass earlier unrelated waiters. Acquisition is
// atomic over the whole set, so grants cannot deadlock. At most MaxHeld grants
// are held at once; a request beyond that waits like a conflicting one.
//
// A grant carries the master's content for its paths as of the moment it was
// granted (Result.Granted, Store.Grant). Since only a grant's own commit may
// write its paths, that content stays current for as long as it is held.
//
// Grant ids are chosen by the caller (the FSM uses the Raft index of the
// acquire entry) and must increase: an id not above every id seen before is
// rejected with ErrDuplicateID. The queue is therefore ordered by id.
//
// # Fencing tokens
//
// When a request is granted it receives a token from an internal counter,
// stored in the snapshot: tokens strictly increase in the order grants are
// given, over the store's whole life, and two conflicting grants are given
// in the order they were requested. A commit names the grant id and its
// token; a commit for a grant that is not held with that token (released,
// committed, expired, revoked, still waiting, never acquired) or whose lease
// has run out is rejected with ErrStaleGrant. A commit's writes must lie at
// or under the grant's paths (else ErrOutsideGrant); they apply atomically,
// deletes before sets, and the commit releases the grant.
//
// # Time and leases
//
// The store never reads a clock: every operation carries Now, the leader's
// clock in unix nanoseconds. The store keeps the largest Now it has applied
// and raises an older Now to it, so its time never runs backwards across a
// leader change. A grant is granted at the Now of the operation that granted
// it (its own acquire, or the commit, release, expiry or worker loss that
// unblocked it) and its lease ends at granted-at + lease. Expire revokes the
// held grants whose lease has ended (end <= Now) and grants the waiters they
// blocked; NextExpiry tells the leader when to apply it. A commit whose lease
// has ended is refused even before Expire runs.
//
// # Events
//
// Every operation returns a Result: the grants it granted (with token,
// granted-at and content), the grants it ended and why, and the paths a
// commit wrote, so the caller can wake whoever waits on a grant or a path.
// An operation that returns an error changes nothing and has no events.
//
// # Snapshots
//
// MarshalJSON writes the whole state (entries, held grants, the queue in
// order, the counters and the clock); UnmarshalJSON validates and restores it
// exactly. Clone is a deep copy for the FSM's Snapshot.
//
// A Store is not safe for concurrent use: the FSM serialises writers. The
// read-only methods (Get, Grant, Grants, NextExpiry, Stats, MarshalJSON,
// Clone) may run concurrently with each other.
package store
