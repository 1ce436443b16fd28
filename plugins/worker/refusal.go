package worker

import (
	"errors"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Refusal is an error a Message returns to refuse a message with a code the
// page can act on: the page's promise (client.js) rejects with an error
// whose code, retry and message are these. Any other error refuses it too,
// with code "refused" (ErrStateTooLarge: "state_too_large") and retry false.
//
// The message ran: a Refusal is its answer, remembered by its msg_id like a
// value, so the page's client never sends it again on its own.
type Refusal struct {
	// Code is a short word the page's code switches on ("sold_out",
	// "not_allowed"); empty is "refused".
	Code string
	// Message is what the person may read.
	Message string
	// Retry says the same request may succeed later (a lock held for a
	// moment, a quota that refills); the page decides whether to send it
	// again, as a new message.
	Retry bool
}

func (r *Refusal) Error() string { return r.Message }

// refusalOf fills res's error, code and retry from a Message's error.
func refusalOf(err error, res *protocol.MessageResult) {
	res.Error = err.Error()
	var r *Refusal
	switch {
	case errors.As(err, &r):
		res.Code, res.Retry = r.Code, r.Retry
	case errors.Is(err, ErrStateTooLarge):
		res.Code = "state_too_large"
	}
}
