package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/plugins/worker"
)

// Page kinds the demo serves.
const (
	kindGrid     = "grid"
	kindDoc      = "doc"
	kindCustomer = "customer"
)

// Errors a page sees when its message is refused.
var (
	// ErrUnknownKind is returned when a page of another kind opens.
	ErrUnknownKind = errors.New("unknown page kind: the demo has grid, doc and customer pages")
	// ErrUnknownOp is returned for a message whose op the page kind lacks.
	ErrUnknownOp = errors.New("unknown op")
	// ErrBadMessage is returned for a message that is not what its op takes:
	// not an object, a field of the wrong type, a value out of range.
	ErrBadMessage = errors.New("bad message")

	// errNoSession is the cause of a 500 on a request that did not come
	// through a stickyd worker, which has no connection to read or log in.
	errNoSession = errors.New("this request has no stickyd connection: the route runs only inside a stickyd worker")
)

// App is the demo application. It keeps no per-person state of its own:
// everything a person has lives in their pages, so one App serves every user
// of a worker at once.
type App struct {
	log hclog.Logger
	// now is the clock for the document's last-edited time.
	now func() time.Time
	// sessionFrom finds the stickyd connection of a request; tests replace it.
	sessionFrom func(context.Context) session
	// table is the order table; tests give a smaller one.
	table  func() *dataset
	routes http.Handler
	// release is the build (see Release); 0 and 1 are release 1.
	release Release
}

var _ worker.App = (*App)(nil)

// New returns the demo application, ready for worker.Serve. The order table
// is generated on the first grid page, not here.
func New() *App {
	a := &App{
		log:         hclog.New(&hclog.LoggerOptions{Name: "demo", Output: os.Stderr, JSONFormat: true}),
		now:         time.Now,
		sessionFrom: stickydSession,
		table:       data,
	}
	a.routes = a.newRoutes()
	return a
}

// ServeHTTP serves the site: the page, its assets, login and whoami.
func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.routes.ServeHTTP(w, r)
}

// OpenPage fills a new page's tree with its kind's starting state.
func (a *App) OpenPage(ctx context.Context, p *worker.Page) error {
	switch p.Kind() {
	case kindGrid:
		return a.openGrid(p)
	case kindDoc:
		if err := a.openDoc(p); err != nil {
			return err
		}
		if a.release >= 2 {
			// Release 2's additive field: older builds ignore it, and this
			// one tolerates docs that lack it.
			return p.Tree().Set("tags", []any{})
		}
		return nil
	case kindCustomer:
		return a.openCustomer(ctx, p)
	}
	return fmt.Errorf("opening a %q page: %w", p.Kind(), ErrUnknownKind)
}

// Message runs one op of a page. It never panics on what a page sends: a
// message it cannot take is an error wrapping ErrUnknownOp or ErrBadMessage,
// and leaves the tree as it was.
func (a *App) Message(ctx context.Context, p *worker.Page, msg json.RawMessage) (any, error) {
	switch p.Kind() {
	case kindGrid:
		return a.gridMessage(p, msg)
	case kindDoc:
		return a.docMessage(p, msg)
	case kindCustomer:
		return a.customerMessage(ctx, p, msg)
	}
	return nil, fmt.Errorf("handling a %q page's message: %w", p.Kind(), ErrUnknownKind)
}
