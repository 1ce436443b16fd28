package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Needs declares which backends (a database, a payment service: any name the
// operator also uses, "db-a") the site's routes and the pages' messages
// need, one line each:
//
//	var needs = new(worker.Needs).
//		Route("/orders/", "db-a").
//		Op("save", "db-a", "payments")
//
// While a backend is in maintenance (`stickyd maintenance start db-a`), a
// request or message that needs it waits in the person's mailbox, before
// its handler runs, until the window ends; then it runs, in arrival order.
// Past the window's max wait it is refused as retryable (HTTP 503 with
// Retry-After, a WebSocket error with "retry": true). Everything that does
// not need the backend runs as usual. An App declares its Needs by
// implementing Dependent. See docs/maintenance.md.
type Needs struct {
	routes []routeNeeds
	ops    map[string][]string
}

type routeNeeds struct {
	prefix   string
	backends []string
}

// Route declares that requests whose path starts with prefix need backends.
// Several matching prefixes add up.
func (n *Needs) Route(prefix string, backends ...string) *Needs {
	n.routes = append(n.routes, routeNeeds{prefix: prefix, backends: backends})
	return n
}

// Op declares that page messages whose "op" field is op ({"op": "save",
// ...}) need backends.
func (n *Needs) Op(op string, backends ...string) *Needs {
	if n.ops == nil {
		n.ops = map[string][]string{}
	}
	n.ops[op] = append(n.ops[op], backends...)
	return n
}

// ForPath returns the backends a request for path needs.
func (n *Needs) ForPath(path string) []string {
	if n == nil {
		return nil
	}
	var out []string
	for _, r := range n.routes {
		if strings.HasPrefix(path, r.prefix) {
			out = append(out, r.backends...)
		}
	}
	return out
}

// ForMessage returns the backends a page message needs, by its "op" field.
func (n *Needs) ForMessage(msg json.RawMessage) []string {
	if n == nil || len(n.ops) == 0 {
		return nil
	}
	var m struct {
		Op string `json:"op"`
	}
	if json.Unmarshal(msg, &m) != nil {
		return nil
	}
	return n.ops[m.Op]
}

// Dependent is an optional App ability: Needs says which backends its
// routes and messages need. It is read once, when the worker starts.
type Dependent interface {
	Needs() *Needs
}

// maintenance is the set of backends in maintenance as the host last told
// this worker, and the requests waiting on them.
type maintenance struct {
	mu       sync.Mutex // guards every field
	version  uint64
	active   map[string]*protocol.MaintenanceBackend
	changed  chan struct{} // closed and replaced on every change
	waiting  map[string]int64
	timedOut map[string]uint64
	// open counts the backends in maintenance: a message is looked into
	// for what it needs only while some window is open.
	open atomic.Int32
}

func newMaintenance() *maintenance {
	return &maintenance{active: map[string]*protocol.MaintenanceBackend{}, changed: make(chan struct{}),
		waiting: map[string]int64{}, timedOut: map[string]uint64{}}
}

// set takes the host's notice, unless an older one arrives late.
func (m *maintenance) set(n *protocol.Maintenance) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n.Version != 0 && n.Version < m.version {
		return
	}
	m.version = n.Version
	m.active = make(map[string]*protocol.MaintenanceBackend, len(n.Backends))
	for _, b := range n.Backends {
		m.active[b.Name] = b
	}
	m.open.Store(int32(len(m.active)))
	close(m.changed)
	m.changed = make(chan struct{})
}

// errYielded ends a held request's wait when its person is frozen.
var errYielded = errors.New("the person is moving: the held request goes with them")

// maintenanceError refuses a request that waited past a window's max wait.
type maintenanceError struct {
	backend, reason string
	waited          time.Duration
}

func (e *maintenanceError) Error() string {
	msg := fmt.Sprintf("backend %s is in maintenance", e.backend)
	if e.reason != "" {
		msg += " (" + e.reason + ")"
	}
	return msg + fmt.Sprintf("; waited %s, retry later", e.waited.Round(time.Millisecond))
}

// await returns once none of backends is in maintenance: at once when none
// is. A request waits at most the max wait of the windows it waits on,
// counted from when it began to wait; past it, it gets a maintenanceError.
//
// A closed yield ends the wait with errYielded: the person is being frozen
// (a move, a park), and the request, which has not run, goes with them.
func (m *maintenance) await(ctx context.Context, backends []string, yield <-chan struct{}) error {
	if len(backends) == 0 {
		return nil
	}
	start := time.Now()
	var counted []string
	uncount := func() {
		for _, b := range counted {
			m.waiting[b]--
			if m.waiting[b] <= 0 {
				delete(m.waiting, b)
			}
		}
		counted = counted[:0]
	}
	for {
		m.mu.Lock()
		uncount()
		var (
			first    *protocol.MaintenanceBackend
			deadline time.Time
		)
		for _, b := range backends {
			mb := m.active[b]
			if mb == nil || slices.Contains(counted, b) {
				continue
			}
			counted = append(counted, b)
			m.waiting[b]++
			d := start.Add(time.Duration(mb.MaxWaitMs) * time.Millisecond)
			if first == nil || d.Before(deadline) {
				first, deadline = mb, d
			}
		}
		if first == nil {
			m.mu.Unlock()
			return nil
		}
		changed := m.changed
		m.mu.Unlock()
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
			t.Stop()
			continue
		case <-t.C:
			m.mu.Lock()
			uncount()
			m.timedOut[first.Name]++
			m.mu.Unlock()
			return &maintenanceError{backend: first.Name, reason: first.Reason, waited: time.Since(start)}
		case <-yield:
			t.Stop()
			m.mu.Lock()
			uncount()
			m.mu.Unlock()
			return errYielded
		case <-ctx.Done():
			t.Stop()
			m.mu.Lock()
			uncount()
			m.mu.Unlock()
			return ctx.Err()
		}
	}
}

// report fills a probe's maintenance counts.
func (m *maintenance) report(r *protocol.ProbeReply) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.waiting) > 0 {
		r.MaintenanceWaiting = make(map[string]int64, len(m.waiting))
		for k, v := range m.waiting {
			r.MaintenanceWaiting[k] = v
		}
	}
	if len(m.timedOut) > 0 {
		r.MaintenanceTimedOut = make(map[string]uint64, len(m.timedOut))
		for k, v := range m.timedOut {
			r.MaintenanceTimedOut[k] = v
		}
	}
}

// routeNeeds returns the backends a request for the frame's URL needs; the
// URL is parsed only when the app declared routes.
func (rt *runtime) routeNeeds(rawURL string) []string {
	if rt.needs == nil || len(rt.needs.routes) == 0 {
		return nil
	}
	return rt.needs.ForPath(requestPath(rawURL))
}

// requestPath is the path of a frame's request URL.
func requestPath(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Path
}
