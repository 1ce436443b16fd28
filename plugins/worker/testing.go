package worker

// NewTestPage returns a page detached from any worker, for an application's
// unit tests: its tree records deltas as usual and Deltas reports them.
func NewTestPage(kind string) *Page {
	s := &Session{rt: &runtime{workerID: "test"}, name: "test-conn", values: newTree(nil), pages: map[string]*Page{}}
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
