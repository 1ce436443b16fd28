package front

import "sync"

// Activity is who was seen at a front (lifecycle.forget_after): every
// connection that made a request since the last Take, and every one with a
// WebSocket open now, however quiet. It costs a map insert per request and
// nothing per WebSocket frame; it holds at most the connections seen in one
// interval between Takes.
type Activity struct {
	mu   sync.Mutex
	seen map[string]struct{}
	open map[string]int
}

// NewActivity returns an empty Activity.
func NewActivity() *Activity {
	return &Activity{seen: map[string]struct{}{}, open: map[string]int{}}
}

// saw records a request of conn. a may be nil (nothing is tracked).
func (a *Activity) saw(conn string) {
	if a == nil || conn == "" {
		return
	}
	a.mu.Lock()
	a.seen[conn] = struct{}{}
	a.mu.Unlock()
}

// opened records a WebSocket of conn, seen until closed is called for it
// (once per opened). a may be nil (nothing is tracked).
func (a *Activity) opened(conn string) {
	if a == nil || conn == "" {
		return
	}
	a.mu.Lock()
	a.open[conn]++
	a.mu.Unlock()
}

// closed records the end of a WebSocket of conn that opened reported.
func (a *Activity) closed(conn string) {
	if a == nil || conn == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.open[conn]--; a.open[conn] <= 0 {
		delete(a.open, conn)
	}
	// Seen up to its last moment.
	a.seen[conn] = struct{}{}
}

// Take returns the connections seen since the last Take (a request, or a
// WebSocket open at some point of the interval) and starts a new interval.
func (a *Activity) Take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.seen)+len(a.open))
	for c := range a.seen {
		out = append(out, c)
	}
	for c := range a.open {
		if _, ok := a.seen[c]; !ok {
			out = append(out, c)
		}
	}
	clear(a.seen)
	return out
}
