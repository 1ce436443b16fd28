package demo

import (
	"context"

	"github.com/stickyd/stickyd/plugins/worker"
)

// session is what the routes need of a stickyd connection. *worker.Session
// has it; the routes' tests give a fake, since the SDK offers no way to put a
// Session in a request's context outside a worker.
type session interface {
	Conn() string
	User() string
	WorkerID() string
	Login(user string) error
}

var _ session = (*worker.Session)(nil)

// stickydSession is the connection of a request, or nil outside stickyd.
func stickydSession(ctx context.Context) session {
	if s := worker.SessionFrom(ctx); s != nil {
		return s
	}
	return nil // not a typed nil *worker.Session, which would not be == nil
}
