package governor

import "time"

// Kind says what a Decision asks for, or what an Event records.
type Kind string

// Decision kinds: what the caller is asked to do.
const (
	// KindMove: move User from Worker to To, by the one road
	// (move.Move(ctx, User, To, Cause)).
	KindMove Kind = "move"
	// KindStart: start one more worker in Group. Before Done, set To to the
	// started worker's name if known.
	KindStart Kind = "start"
	// KindReplace: Worker is to be replaced. Stop placing newcomers on it
	// and start a fresh worker in Group; before Done, set To to its name.
	// The engine then moves everyone from Worker to To with KindMove
	// decisions and finally decides KindRetire.
	KindReplace Kind = "replace"
	// KindDrain: Worker is to be emptied (compaction). Stop placing
	// newcomers on it; the engine then moves its users out with KindMove
	// decisions and finally decides KindRetire. Done with ok false cancels
	// the drain.
	KindDrain Kind = "drain"
	// KindRetire: Worker is empty (0 users, 0 pages, 0 grants in a reading
	// taken after its drain began): stop it. After Done with ok true the
	// engine forgets it.
	KindRetire Kind = "retire"
)

// Event-only kinds: what happened to a decision, or why none was taken.
const (
	// KindCompleted records a decision reported Done with ok true.
	KindCompleted Kind = "completed"
	// KindFailed records a decision reported Done with ok false.
	KindFailed Kind = "failed"
	// KindBlocked records that a rule wanted to act and could not (no room,
	// the group at its max, nobody free to leave). It is recorded once per
	// worker and cause, not at every round.
	KindBlocked Kind = "blocked"
)

// Causes, short and few, for metric labels (the reason argument of
// move.Move); the Reason string is the explanation for people.
const (
	// CauseSaturation: a worker over a threshold gives up users.
	CauseSaturation = "saturation"
	// CauseReplace: a worker whose memory nears its ceiling is replaced.
	CauseReplace = "replace"
	// CauseCompact: a quiet group loses its least loaded worker.
	CauseCompact = "compact"
)

// Decision is one thing the engine asks the caller to do. Every decision
// returned by Decide must be reported once with Done.
type Decision struct {
	// ID identifies the decision for Done.
	ID uint64
	// Kind is one of KindMove, KindStart, KindReplace, KindDrain, KindRetire.
	Kind Kind
	// Group is the group concerned.
	Group string
	// Worker is the worker acted on: a move's source, the worker replaced,
	// drained or retired; empty for KindStart.
	Worker string
	// User is the user moved (KindMove only).
	User string
	// To is a move's destination; for KindStart and KindReplace the caller
	// sets it to the started worker before Done.
	To string
	// Cause is a short label for metrics: CauseSaturation, CauseReplace or
	// CauseCompact.
	Cause string
	// Reason explains the decision with its numbers, e.g. "w-3 over memory
	// 91% > 85% (932 MiB of 1.0 GiB): moving u-17 to w-5 (used 38% of w-3's
	// recent memory growth; w-5 at memory 40%)".
	Reason string
}

// Event is one entry of the engine's history.
type Event struct {
	// At is the caller's clock when the event happened.
	At time.Time `json:"at"`
	// Kind is a decision kind (the decision was taken) or KindCompleted,
	// KindFailed, KindBlocked.
	Kind Kind `json:"kind"`
	// ID is the decision's ID; 0 for KindBlocked.
	ID uint64 `json:"id,omitempty"`
	// Group, Worker, User and To are those of the decision, or what a
	// KindBlocked event is about.
	Group  string `json:"group,omitempty"`
	Worker string `json:"worker,omitempty"`
	User   string `json:"user,omitempty"`
	To     string `json:"to,omitempty"`
	// Reason explains, with numbers.
	Reason string `json:"reason"`
}

// HistorySize is how many events the engine keeps; older ones are dropped.
const HistorySize = 256

// ring is a bounded history of events, oldest dropped first.
type ring struct {
	buf  []Event
	next int // where the next event goes once buf is full
}

func (r *ring) add(e Event) {
	if len(r.buf) < HistorySize {
		r.buf = append(r.buf, e)
		return
	}
	r.buf[r.next] = e
	r.next = (r.next + 1) % HistorySize
}

// all returns the events oldest first, as a copy.
func (r *ring) all() []Event {
	out := make([]Event, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}
