package worker

import (
	"context"
	"encoding/json"
	"net/http"
)

// NewTestPage returns a page detached from any worker, for an application's
// unit tests: its tree records deltas as usual; TestDeltas reports them.
func NewTestPage(kind string) *Page {
	s := &Session{rt: &runtime{workerID: "test", app: noApp{}}, name: "test-conn", values: newTree(nil), pages: map[string]*Page{}}
	p := newPage(s, "test-page", kind)
	s.pages[p.id] = p
	return p
}

// PendingDeltas is how many deltas the page has not yet delivered; for tests.
func (p *Page) PendingDeltas() int {
	p.coll.mu.Lock()
	defer p.coll.mu.Unlock()
	return len(p.coll.pending)
}

// TestDelta is a delta as a test sees it.
type TestDelta struct {
	Op    string // "set", "delete" or "reset"
	Path  string
	Value string // JSON
}

// TestDeltas returns the deltas the page has not yet delivered; for tests.
func (p *Page) TestDeltas() []TestDelta {
	p.coll.mu.Lock()
	defer p.coll.mu.Unlock()
	out := make([]TestDelta, len(p.coll.pending))
	for i, d := range p.coll.pending {
		out[i] = TestDelta{Op: [...]string{"set", "delete", "reset"}[d.Op], Path: d.Path, Value: string(d.Value)}
	}
	return out
}

// NewTestContext returns ctx carrying a new connection's Session, so that an
// application's ServeHTTP can be tested with httptest:
// req = req.WithContext(worker.NewTestContext(ctx)).
func NewTestContext(ctx context.Context) context.Context {
	s := &Session{rt: &runtime{workerID: "test", app: noApp{}}, name: randomName(), isNew: true, values: newTree(nil), pages: map[string]*Page{}}
	return context.WithValue(ctx, sessionKey{}, s)
}

// noApp stands in for the App of a detached test page.
type noApp struct{}

func (noApp) ServeHTTP(http.ResponseWriter, *http.Request)                 {}
func (noApp) OpenPage(context.Context, *Page) error                        { return nil }
func (noApp) Message(context.Context, *Page, json.RawMessage) (any, error) { return nil, nil }
