package front

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// overflowBudget bounds the connections past the limit that are still
// read, to answer a health check or refuse with 503; past it a connection
// is closed at once.
const overflowBudget = 256

// overflowWait bounds how long a connection past the limit may take to
// send its request.
const overflowWait = 2 * time.Second

// Listener bounds the connections a front holds open. Up to max, accepted
// connections are served as usual (Accept). Past it, a connection is
// handed to a small server of its own, which answers a health check
// (GET /_stickyd/health: a load balancer keeps seeing the front alive) and
// refuses anything else with 503 and Retry-After, closing each connection
// after its one answer; past overflowBudget of those at once, a connection
// is closed unread. The file limit is never reached by visitors: the
// process keeps its files for raft, the park store, the workers and the
// admin API.
type Listener struct {
	net.Listener
	max      int64
	open     atomic.Int64
	overflow chan net.Conn
	busy     atomic.Int64 // overflow connections being answered
	srv      *http.Server
	done     chan struct{}
	once     sync.Once

	refused        prometheus.Counter
	framingRefused func(framingReason)
}

// Limit wraps ln so that at most max of its connections are served by f at
// once (see Listener); max <= 0 is no bound.
func (f *Front) Limit(ln net.Listener, max int) *Listener {
	l := &Listener{Listener: ln, max: int64(max), overflow: make(chan net.Conn), done: make(chan struct{})}
	l.refused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stickyd_front_connections_refused_total",
		Help: "Connections to the front past front.max_connections: answered 503 (or their health check), or closed unread when too many came at once.",
	})
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "stickyd_front_connections",
		Help: "Connections the front holds open (keep-alive, WebSockets, requests in flight), at most front.max_connections.",
	}, func() float64 { return float64(l.open.Load()) })
	limit := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "stickyd_front_connections_max",
		Help: "front.max_connections: the connections the front holds open at most (0: no bound).",
	}, func() float64 { return float64(l.max) })
	framing := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stickyd_front_framing_refused_total",
		Help: "Requests refused 400 for their framing, by the rule they broke: bare_lf, bare_cr, content_length_and_transfer_encoding, transfer_coding, chunk, field_too_long.",
	}, []string{"reason"})
	for _, r := range []framingReason{reasonBareLF, reasonBareCR, reasonCLAndTE, reasonCoding, reasonChunk, reasonLongLine} {
		framing.WithLabelValues(string(r))
	}
	l.framingRefused = func(r framingReason) { framing.WithLabelValues(string(r)).Inc() }
	if f.cfg.Registry != nil {
		f.cfg.Registry.MustRegister(l.refused, open, limit, framing)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"health", f.handle(f.health))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		_ = writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"error": "this front holds as many connections as it may (front.max_connections); retry shortly", "retry": true})
	})
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: overflowWait, ReadTimeout: overflowWait, WriteTimeout: overflowWait}
	l.srv.SetKeepAlivesEnabled(false)
	go func() { _ = l.srv.Serve(overflowListener{l}) }()
	return l
}

// Accept returns the next connection within the bound, handing the others
// to the overflow server.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.max <= 0 || l.open.Add(1) <= l.max {
			if l.max <= 0 {
				l.open.Add(1)
			}
			return &strictConn{Conn: &countedConn{Conn: c, n: &l.open}, f: newFraming(), refused: l.framingRefused}, nil
		}
		l.open.Add(-1)
		l.refused.Inc()
		if l.busy.Add(1) > overflowBudget {
			l.busy.Add(-1)
			_ = c.Close()
			continue
		}
		select {
		case l.overflow <- &countedConn{Conn: c, n: &l.busy}:
		case <-l.done:
			l.busy.Add(-1)
			_ = c.Close()
		}
	}
}

// Open is the number of connections held now.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Close stops accepting and ends the overflow server.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		_ = l.srv.Close()
	})
	return l.Listener.Close()
}

// countedConn is a connection counted in n while it is open: a served one
// in the listener's open count, one past the bound in its busy count.
type countedConn struct {
	net.Conn
	n    *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.n.Add(-1) })
	return c.Conn.Close()
}

// overflowListener feeds the overflow server.
type overflowListener struct{ l *Listener }

func (o overflowListener) Accept() (net.Conn, error) {
	select {
	case c := <-o.l.overflow:
		return c, nil
	case <-o.l.done:
		return nil, errors.New("the front's listener is closed")
	}
}

func (o overflowListener) Close() error   { return nil }
func (o overflowListener) Addr() net.Addr { return o.l.Addr() }
