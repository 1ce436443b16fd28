// Package front is the HTTP and WebSocket door of stickyd. It keeps no state
// of its own: for every request it reads where the person lives from the
// Directory (the local replica of the supervisor's maps), turns the request
// into a frame, sends it to that worker, and writes the answer back. Its own
// routes live under the reserved prefix /_stickyd/; everything else belongs
// to the hosted site and is forwarded.
//
// The browser's WebSocket ends here, so a worker can change under it without
// the socket closing. The front never mints an identity: the site names its
// connection and the front only signs that name into a cookie.
package front

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Prefix is the front's reserved path prefix; the site never sees it.
const Prefix = "/_stickyd/"

// Directory is how the front reads and writes the placement maps.
type Directory interface {
	// Lookup returns a connection's route from the local replica.
	Lookup(conn string) (placement.Route, bool)
	// Place chooses a worker for a new connection.
	Place(ctx context.Context) (string, error)
	// Connect binds a connection the site just named (and its user, if the
	// site already said who it is) to a worker.
	Connect(ctx context.Context, conn, user, worker string) (placement.Route, error)
	// Login binds a connection to a person and records what the site
	// declared about them (attrs, when not nil); it returns the new route
	// and the worker that held the connection before.
	Login(ctx context.Context, conn, user string, attrs map[string]string) (placement.Route, string, error)
	// Watch returns a channel closed at the next change of user in the maps.
	Watch(user string) <-chan struct{}
}

// Dispatcher delivers frames to workers. Frames started from one goroutine
// reach the worker in order.
type Dispatcher interface {
	Send(ctx context.Context, worker string, f *protocol.Frame) (*channel.Call, error)
}

// Config configures a Front. Zero values take the defaults noted.
type Config struct {
	Directory  Directory
	Dispatcher Dispatcher
	// Activity, if set, records the connections seen here (their
	// requests and open WebSockets) for lifecycle.forget_after.
	Activity *Activity
	// CookieKeys is the key ring of connection cookies, each key at least
	// MinCookieKeyBytes long and no two the same: the first signs new
	// cookies, every one verifies. A rotation puts a new key first and
	// keeps the old one behind it (for the cookie's 24 hours), so nobody is
	// logged out; a cookie no key verifies, tampered or signed by a key no
	// longer in the ring, names nobody and its bearer gets a new identity.
	CookieKeys [][]byte
	// CookieName defaults to "stickyd_conn".
	CookieName string
	// CookieTTL is a cookie's life from its issue (default 24 h): its
	// issue time is inside the signed value, a cookie past it names nobody
	// (its bearer gets a new identity, like a forged one's), and one past
	// half of it is renewed on the next answer, so an active tab keeps its
	// session.
	CookieTTL time.Duration
	// Now is the clock of cookie issue and expiry and of the newcomer
	// limit; default time.Now.
	Now func() time.Time
	// NewcomerRate bounds the requests without a valid cookie (each a
	// possible new person) per second from one source address (an IPv6
	// address by its /64), with bursts of NewcomerBurst (default 10 × the
	// rate); over it, 429. 0 is the default, DefaultNewcomerRate; negative
	// is no limit.
	NewcomerRate  float64
	NewcomerBurst int
	// SecureCookie sets the cookie's Secure attribute (behind TLS).
	SecureCookie bool
	// MaxMessageBytes bounds one WebSocket message; a bigger one closes the
	// socket with 1009. Default 1 MiB.
	MaxMessageBytes int64
	// MaxBodyBytes bounds an HTTP request body; default 10 MiB.
	MaxBodyBytes int64
	// BodyTimeout bounds the reading of a request body (a site request's,
	// a POST /_stickyd/op's); slower is answered 408. Default 60 s.
	BodyTimeout time.Duration
	// FrameTimeout bounds how long a frame waits for its worker (including
	// a worker being replaced); default 30 s. Pulls wait longer by design.
	FrameTimeout time.Duration
	// RequestTimeout bounds how long a site request waits for its answer
	// (a streamed response: for its status and headers; the body then runs
	// as long as the site writes it); default 5 minutes. A site route that
	// takes minutes (an export, a report) is answered, not cut at
	// FrameTimeout; a worker that dies under it fails it at once.
	RequestTimeout time.Duration
	// PingInterval is how often the front pings an idle WebSocket; default 20 s.
	PingInterval time.Duration
	// WriteTimeout bounds one WebSocket write; default 10 s.
	WriteTimeout time.Duration
	// SendQueue is how many answers may wait for a slow WebSocket before
	// the front closes it (1013, try again later); default 256.
	SendQueue int
	// BarrierWait bounds how long a frame waits for a person who is
	// moving; default 5 s. Past it: 503 with Retry-After (WebSocket: a
	// retryable error).
	BarrierWait time.Duration
	// MaxHeldPerUser and MaxHeld cap the frames held on the barrier for one
	// person and in all; defaults 64 and 10000.
	MaxHeldPerUser int
	MaxHeld        int
	// FrameRate is how many frames a second one person may send through
	// this front: WebSocket ops, POST /_stickyd/op, and site requests of a
	// known connection, all of the person's connections together, from a
	// token bucket holding FrameBurst. A frame over it is refused at once
	// (WebSocket: code "rate_limited", retry true; HTTP: 429 with
	// Retry-After) and counted in stickyd_front_rate_limited_frames_total.
	// Zero (the default) is no limit; FrameBurst zero is twice FrameRate.
	FrameRate  float64
	FrameBurst int
	// BodyBudget bounds the bytes of request bodies held at once, all
	// requests together (default DefaultBodyBudget, and at least
	// MaxBodyBytes); past it a request waits briefly, then gets 503.
	BodyBudget int64
	// Registry receives the front's metrics; nil means none.
	Registry prometheus.Registerer
	// Monitor, if set, serves the monitor web page under
	// /_stickyd/monitor/ (it sees paths with that prefix stripped and does
	// its own admin authentication).
	Monitor http.Handler
	// ExtraWait, if set, is added to the time a request waits for its
	// worker: the longest max wait of the maintenance windows open now.
	ExtraWait func() time.Duration
	// Health adds fields to /_stickyd/health, shown only to a request
	// carrying HealthToken (Authorization: Bearer): anyone else is told
	// the status and whether a worker is ready, nothing more.
	Health func() map[string]any
	// HealthToken opens the health check's details (the admin token);
	// empty shows them to nobody.
	HealthToken string
	// HealthReadToken opens them too (the read token; "": none).
	HealthReadToken string
	Logger          hclog.Logger
}

// Front serves HTTP and WebSocket.
type Front struct {
	cfg       Config
	log       hclog.Logger
	cookie    atomic.Pointer[keyRing] // SetCookieKeys swaps it
	barrier   *barrier
	limiter   *frameLimiter    // nil: no rate limit
	newcomers *newcomerLimiter // nil: no newcomer limit
	bodies    *bodyBudget
	// cookieChecks counts cookie verifications by result (current_key,
	// older_key, invalid).
	cookieChecks   *prometheus.CounterVec
	cookieRenewals prometheus.Counter
	// streams counts the streamed site responses being sent (stream.go);
	// streamsEnded counts them by how they ended.
	streams      atomic.Int64
	streamsEnded *prometheus.CounterVec
	upgrader     websocket.Upgrader
	// hello is a batching page's first frame (helloFrame).
	hello []byte
	mux   *http.ServeMux
	// root is the front's context; Close cancels it and closes the
	// sockets open.
	root     context.Context
	shutdown context.CancelFunc
	socksMu  sync.Mutex
	socks    map[*wsConn]struct{} // the WebSockets open
	pinger   sync.Once            // starts pingLoop, at the first socket
	// routes hands a socket's frame to an idle router, writes a socket
	// with answers waiting to an idle writer (route.go).
	routes  chan *routeJob
	writes  chan *wsConn
	routers crew
	writers crew
}

//go:embed assets/client.js
var clientJS []byte

// clientTypes are client.js's TypeScript declarations; clientModule is
// client.js as an ES module (the script, then its exports).
//
//go:embed assets/client.d.ts
var clientTypes []byte

var clientModule = append(append([]byte(nil), clientJS...),
	"\nexport const page = window.stickyd.page;\nexport const html = window.stickyd.html;\nexport default window.stickyd;\n"...)

// New checks cfg and returns a Front.
func New(cfg Config) (*Front, error) {
	if cfg.Directory == nil || cfg.Dispatcher == nil {
		return nil, errors.New("front: a Directory and a Dispatcher are required")
	}
	ring, err := newKeyRing(cfg.CookieKeys)
	if err != nil {
		return nil, fmt.Errorf("front: %w", err)
	}
	if !(cfg.FrameRate >= 0) || cfg.FrameBurst < 0 { // NaN too
		return nil, errors.New("front: the frame rate and burst must not be negative")
	}
	if cfg.FrameRate > 0 && cfg.FrameBurst == 0 {
		cfg.FrameBurst = int(max(1, min(2*cfg.FrameRate, 1<<30)))
	}
	if cfg.CookieName == "" {
		cfg.CookieName = "stickyd_conn"
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = 60 * time.Second
	}
	if cfg.CookieTTL <= 0 {
		cfg.CookieTTL = DefaultCookieTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = 1 << 20
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 10 << 20
	}
	if cfg.BodyBudget <= 0 {
		cfg.BodyBudget = max(DefaultBodyBudget, cfg.MaxBodyBytes)
	}
	if cfg.BodyBudget < cfg.MaxBodyBytes || cfg.BodyBudget < cfg.MaxMessageBytes {
		return nil, fmt.Errorf("front: body_budget_bytes (%d) must be at least max_body_bytes (%d) and max_message_bytes (%d)", cfg.BodyBudget, cfg.MaxBodyBytes, cfg.MaxMessageBytes)
	}
	// A frame must fit in one channel envelope, with room for its headers.
	const ceiling = channel.MaxEnvelopeBytes - 1<<20
	if cfg.MaxBodyBytes > ceiling || cfg.MaxMessageBytes > ceiling {
		return nil, fmt.Errorf("front: max_body_bytes and max_message_bytes must stay under %d (the channel's envelope limit)", ceiling)
	}
	if cfg.FrameTimeout <= 0 {
		cfg.FrameTimeout = 30 * time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Minute
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 20 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.SendQueue <= 0 {
		cfg.SendQueue = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.BarrierWait <= 0 {
		cfg.BarrierWait = 5 * time.Second
	}
	if cfg.MaxHeldPerUser <= 0 {
		cfg.MaxHeldPerUser = 64
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = 10000
	}
	f := &Front{cfg: cfg, log: cfg.Logger, hello: helloFrame(cfg.MaxMessageBytes)}
	f.cookie.Store(ring)
	f.barrier = newBarrier(cfg.Directory, cfg, cfg.Registry)
	f.limiter = newFrameLimiter(cfg, cfg.Registry)
	f.newcomers = newNewcomerLimiter(cfg, cfg.Registry)
	f.bodies = newBodyBudget(cfg.BodyBudget, cfg.Registry)
	f.cookieChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stickyd_front_cookie_checks_total",
		Help: "Connection cookies checked, by result: current_key (signed by the ring's first key), older_key (by a key behind it), older_form (issued by an older version, not bound to a person), invalid (no key of the ring, or bound to a person the connection no longer belongs to), expired (past front.cookie_ttl).",
	}, []string{"result"})
	f.cookieRenewals = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stickyd_front_cookie_renewals_total",
		Help: "Connection cookies issued again to their bearer: past half their life, in the older form, or signed by a key behind the ring's first.",
	})
	for _, r := range []string{"current_key", "older_key", "older_form", "invalid", "expired"} {
		f.cookieChecks.WithLabelValues(r)
	}
	f.streamsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stickyd_front_site_streams_ended_total",
		Help: "Streamed site responses by how they ended: whole (the handler finished), client_left (the client or a write timed out), worker (a read failed: the worker or its host is gone, or gave the stream up), handler_failed (after the headers), stopping (the front's stop).",
	}, []string{"how"})
	for _, r := range []string{streamWhole, streamClientLeft, streamWorker, streamHandlerFailed, streamStopping} {
		f.streamsEnded.WithLabelValues(r)
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(f.cookieChecks, f.cookieRenewals, f.streamsEnded,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_front_site_streams", Help: "Streamed site responses being sent (each holds its client's connection and one goroutine; its worker holds at most 1 MiB of it unread)."}, func() float64 {
				return float64(f.streams.Load())
			}),
			// Routers and writers are bounded by the sockets with work
			// (a frame routing, answers waiting); idle ones stop after a
			// ping interval (route.go).
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_front_routers", Help: "Goroutines routing the WebSockets' frames, busy or idle."}, func() float64 {
				return float64(f.routers.running.Load())
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_front_writers", Help: "Goroutines writing the WebSockets' answers, busy or idle."}, func() float64 {
				return float64(f.writers.running.Load())
			}))
	}
	f.root, f.shutdown = context.WithCancel(context.Background())
	f.socks = map[*wsConn]struct{}{}
	f.routes = make(chan *routeJob)
	f.writes = make(chan *wsConn)
	// An idle WebSocket holds a small read buffer and no write buffer: a
	// write takes one from the pool for its length (a page's ops are small;
	// a larger message is read through the buffer, not into it).
	f.upgrader = websocket.Upgrader{ReadBufferSize: wsReadBuffer, WriteBufferSize: wsWriteBuffer, WriteBufferPool: &sync.Pool{}}
	f.mux = http.NewServeMux()
	f.mux.HandleFunc("GET "+Prefix+"health", f.handle(f.health))
	f.mux.HandleFunc("GET "+Prefix+"client.js", f.asset("text/javascript; charset=utf-8", clientJS))
	f.mux.HandleFunc("GET "+Prefix+"client.mjs", f.asset("text/javascript; charset=utf-8", clientModule))
	f.mux.HandleFunc("GET "+Prefix+"client.d.ts", f.asset("application/typescript; charset=utf-8", clientTypes))
	f.mux.HandleFunc("GET "+Prefix+"ws", f.handle(f.serveWS))
	f.mux.HandleFunc("POST "+Prefix+"op", f.handle(f.serveOp))
	f.mux.HandleFunc("POST "+Prefix+"renew", f.handle(f.serveRenew))
	if cfg.Monitor != nil {
		f.mux.Handle(Prefix+"monitor/", http.StripPrefix(Prefix+"monitor", cfg.Monitor))
	}
	f.mux.HandleFunc(Prefix, f.handle(func(w http.ResponseWriter, r *http.Request) error {
		return &HTTPError{Status: http.StatusNotFound, Message: "no such stickyd route: " + r.URL.Path}
	}))
	f.mux.HandleFunc("/", f.handle(f.serveSite))
	return f, nil
}

// Close closes every WebSocket (1001, going away: the page reconnects);
// an http.Server's Shutdown does not see hijacked connections. Idempotent.
func (f *Front) Close() {
	f.shutdown()
	f.socksMu.Lock()
	for c := range f.socks {
		// Each says goodbye (1001) from a goroutine of its own: a slow
		// client holds up no other.
		c.close()
	}
	f.socksMu.Unlock()
	// The routers and writers stop once their sockets' last work is done.
	go f.stopHelpers()
}

// track records an open WebSocket until untrack; a socket that opens as
// the front closes is closed at once.
func (f *Front) track(c *wsConn) {
	f.pinger.Do(func() { go f.pingLoop() })
	f.socksMu.Lock()
	f.socks[c] = struct{}{}
	f.socksMu.Unlock()
	if f.root.Err() != nil {
		c.close()
	}
}

func (f *Front) untrack(c *wsConn) {
	f.socksMu.Lock()
	delete(f.socks, c)
	f.socksMu.Unlock()
}

// pingLoop pings the open WebSockets, each PingInterval after its last ping
// (up to a quarter later), until the front closes: one goroutine and one
// ticker for every socket, where a timer each would cost an idle socket
// another hundred-odd bytes.
func (f *Front) pingLoop() {
	tick := time.NewTicker(max(f.cfg.PingInterval/4, 10*time.Millisecond))
	defer tick.Stop()
	var due []*wsConn
	for {
		select {
		case <-f.root.Done():
			return
		case now := <-tick.C:
			f.socksMu.Lock()
			for c := range f.socks {
				if at := c.pingAt.Load(); at != 0 && at <= now.UnixNano() && c.pingAt.CompareAndSwap(at, 0) {
					due = append(due, c)
				}
			}
			f.socksMu.Unlock()
			for _, c := range due {
				c.pingTime()
			}
			clear(due)
			due = due[:0]
			f.trimHelpers()
		}
	}
}

// ServeHTTP implements http.Handler.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(r.Header.Values("Upgrade")) > 0 {
		// The framing scanner reads nothing past an upgrade's header
		// (framing.go): a refused one ends the connection. A WebSocket
		// that opens takes the connection over and never writes this.
		w.Header().Set("Connection", "close")
	}
	f.mux.ServeHTTP(w, r)
}

func (f *Front) health(w http.ResponseWriter, r *http.Request) error {
	out := map[string]any{"status": "ok"}
	if f.cfg.Health != nil {
		details := f.cfg.Health()
		if f.healthDetails(r) {
			for k, v := range details {
				out[k] = v
			}
		}
		if n, ok := details["ready"].(int); ok {
			out["ready"] = n > 0
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

// healthDetails reports whether r carries the health check's token.
func (f *Front) healthDetails(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || f.cfg.HealthToken == "" {
		return false
	}
	c := sha256.Sum256([]byte(tok))
	admin, read := sha256.Sum256([]byte(f.cfg.HealthToken)), sha256.Sum256([]byte(f.cfg.HealthReadToken))
	ok = subtle.ConstantTimeCompare(c[:], admin[:]) == 1
	return subtle.ConstantTimeCompare(c[:], read[:]) == 1 && f.cfg.HealthReadToken != "" || ok
}

// asset serves one of the front's own files.
func (f *Front) asset(contentType string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(body)
	}
}

// readBody reads r's body, at most limit bytes within the body timeout:
// past the size 413, past the time 408, a broken body 400, no room in the
// body budget 503. The body's bytes stay counted in the budget until the
// caller calls release (always non-nil), once the body is no longer held.
func (f *Front) readBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, release func(), err error) {
	want := limit
	if r.ContentLength >= 0 {
		want = min(r.ContentLength, limit+1) // one more, to see it is too large
	}
	if r.ContentLength > limit {
		return nil, func() {}, &HTTPError{Status: http.StatusRequestEntityTooLarge, Message: "request body too large"}
	}
	shrink, release, err := f.bodies.reserve(r.Context(), want)
	if err != nil {
		return nil, func() {}, err
	}
	body, err = f.readBodyReserved(w, r, limit)
	if err != nil {
		release()
		return nil, func() {}, err
	}
	shrink(int64(len(body)))
	return body, release, nil
}

func (f *Front) readBodyReserved(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(f.cfg.BodyTimeout))
	buf := bytes.NewBuffer(make([]byte, 0, max(0, min(r.ContentLength, limit))))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	body := buf.Bytes()
	if err != nil {
		// The deadline stays: the server, which reads what is left of a
		// body before it answers, gives up at once and closes the
		// connection after the answer.
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, &HTTPError{Status: http.StatusRequestEntityTooLarge, Message: "request body too large"}
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, &HTTPError{Status: http.StatusRequestTimeout, Message: fmt.Sprintf("the request body took longer than %v to arrive", f.cfg.BodyTimeout)}
		}
		return nil, &HTTPError{Status: http.StatusBadRequest, Message: "reading request body: " + err.Error()}
	}
	// The connection may wait for its next request (or a long pull's
	// answer) as long as it needs.
	_ = rc.SetReadDeadline(time.Time{})
	return body, nil
}

// DefaultCookieTTL is a connection cookie's life unless configured.
const DefaultCookieTTL = 24 * time.Hour

// cookieSkew is how far ahead of this clock a cookie's issue time may be
// (another server's clock); beyond, it names nobody.
const cookieSkew = 5 * time.Minute

// checked is what a request's cookie says: the connection it names (""
// for none), that connection's route when the maps hold it, when the
// cookie was issued (zero for one in the older form) and whether it is due
// to be issued again (past half its life, in the older form, or signed by
// a key behind the ring's first).
type checked struct {
	conn   string
	route  placement.Route
	known  bool
	issued time.Time
	renew  bool
}

// cookieOf checks a request's cookie, with one lookup in the maps. A
// cookie is bound to the person its connection belonged to when it was
// issued (keyRing.verify): once the maps say the connection is someone
// else's, it names nobody.
func (f *Front) cookieOf(r *http.Request) checked {
	c, err := r.Cookie(f.cfg.CookieName)
	if err != nil {
		return checked{}
	}
	var ck checked
	userOf := func(conn string) string {
		// The value names one connection: verify asks about it once.
		ck.route, ck.known = f.cfg.Directory.Lookup(conn)
		if !ck.known {
			return ""
		}
		return ck.route.User
	}
	conn, issued, key, legacy, ok := f.ring().verify(c.Value, userOf)
	if !ok {
		f.cookieChecks.WithLabelValues("invalid").Inc()
		return checked{}
	}
	now := f.cfg.Now()
	if !issued.IsZero() && (now.Sub(issued) >= f.cfg.CookieTTL || issued.Sub(now) > cookieSkew) {
		f.cookieChecks.WithLabelValues("expired").Inc()
		return checked{}
	}
	switch {
	case legacy:
		f.cookieChecks.WithLabelValues("older_form").Inc()
	case key > 0:
		f.cookieChecks.WithLabelValues("older_key").Inc()
	default:
		f.cookieChecks.WithLabelValues("current_key").Inc()
	}
	ck.conn, ck.issued = conn, issued
	ck.renew = legacy || key > 0 || issued.IsZero() || now.Sub(issued) >= f.cfg.CookieTTL/2
	return ck
}

// ring is the cookie key ring in force.
func (f *Front) ring() *keyRing { return f.cookie.Load() }

// SetCookieKeys replaces the cookie key ring (the cluster's ring changed:
// a rotation, or the ring the maps hold replacing the one the front
// started with). Requests under way finish with the ring they began with.
func (f *Front) SetCookieKeys(keys [][]byte) error {
	ring, err := newKeyRing(keys)
	if err != nil {
		return err
	}
	f.cookie.Store(ring)
	return nil
}

// cookieFor is the cookie naming conn, bound to user ("" for the
// connection's anonymous key), issued now.
func (f *Front) cookieFor(conn, user string) *http.Cookie {
	return &http.Cookie{
		Name:     f.cfg.CookieName,
		Value:    f.ring().sign(conn, user, f.cfg.Now()),
		Path:     "/",
		MaxAge:   int(f.cfg.CookieTTL.Seconds()),
		HttpOnly: true,
		Secure:   f.cfg.SecureCookie,
		SameSite: http.SameSiteLaxMode,
	}
}

func (f *Front) setCookie(w http.ResponseWriter, conn, user string) {
	http.SetCookie(w, f.cookieFor(conn, user))
}

// boundConn is what a request's valid cookie names, when the maps know its
// connection (errNoConnection otherwise).
func (f *Front) boundConn(r *http.Request) (checked, error) {
	ck := f.cookieOf(r)
	if ck.conn == "" || !ck.known {
		return checked{}, errNoConnection
	}
	f.cfg.Activity.saw(ck.conn)
	return ck, nil
}

// serveRenew issues the bearer's cookie again: client.js asks when its
// WebSocket says the cookie is past half its life (a tab that stays on one
// WebSocket all day sends no other request that could renew it).
func (f *Front) serveRenew(w http.ResponseWriter, r *http.Request) error {
	ck, err := f.boundConn(r)
	if err != nil {
		return err
	}
	f.renewCookie(w, ck.conn, ck.route.User)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// renewCookie issues conn's cookie again on w.
func (f *Front) renewCookie(w http.ResponseWriter, conn, user string) {
	f.setCookie(w, conn, user)
	f.cookieRenewals.Inc()
}

// route returns the connection's route, renewing its cookie on w when due.
func (f *Front) route(w http.ResponseWriter, r *http.Request) (placement.Route, bool) {
	ck := f.cookieOf(r)
	if ck.conn == "" || !ck.known {
		return placement.Route{}, false
	}
	f.cfg.Activity.saw(ck.conn)
	if ck.renew {
		f.renewCookie(w, ck.conn, ck.route.User)
	}
	return ck.route, true
}

// call sends a frame and waits for its answer within timeout.
func (f *Front) call(ctx context.Context, worker string, fr *protocol.Frame, timeout time.Duration) (*protocol.FrameReply, error) {
	if f.cfg.ExtraWait != nil {
		// A request may be held in the worker for a maintenance window.
		timeout += f.cfg.ExtraWait()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := f.cfg.Dispatcher.Send(ctx, worker, fr)
	if err != nil {
		return nil, frameErr(err)
	}
	env, err := c.Wait(ctx)
	if err != nil {
		return nil, frameErr(err)
	}
	rep := env.GetFrameReply()
	if rep == nil {
		return nil, &HTTPError{Status: http.StatusBadGateway, Message: "worker answered with an unexpected envelope"}
	}
	return rep, nil
}

// maintenanceRetryAfter is the Retry-After (seconds) of a request refused
// after waiting past a maintenance window's max wait.
const maintenanceRetryAfter = 5

// The WebSocket's buffers: read, held for the socket's life, and write,
// taken from a pool for each message.
const (
	wsReadBuffer  = 512
	wsWriteBuffer = 4096
)

// frameErr turns a dispatch error into what the client is told.
func frameErr(err error) error {
	var re *channel.RemoteError
	switch {
	case errors.As(err, &re):
		switch re.Code {
		case protocol.Error_BAD_REQUEST, protocol.Error_NOT_FOUND:
			if re.Kind == protocol.KindConnTaken {
				return errConnTaken(err)
			}
			return &HTTPError{Status: http.StatusBadRequest, Message: re.Message, Err: err}
		case protocol.Error_MOVED, protocol.Error_UNAVAILABLE:
			return &HTTPError{Status: http.StatusServiceUnavailable, Message: re.Message, Retry: true, Err: err}
		case protocol.Error_MAINTENANCE:
			return &HTTPError{Status: http.StatusServiceUnavailable, Message: re.Message, Retry: true,
				RetryAfter: maintenanceRetryAfter, Code: "maintenance", Err: err}
		default:
			return &HTTPError{Status: http.StatusInternalServerError, Message: "the application failed on this request", Err: err}
		}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, channel.ErrClosed):
		return &HTTPError{Status: http.StatusServiceUnavailable, Message: "the worker holding this session is unavailable; retry shortly", Retry: true, Err: err}
	default:
		return &HTTPError{Status: http.StatusServiceUnavailable, Message: "the worker holding this session is unavailable; retry shortly", Retry: true, Err: err}
	}
}

// errConnTaken is the answer to a newcomer the site named after an
// existing connection: no cookie, nobody's person.
func errConnTaken(err error) error {
	return &HTTPError{Status: http.StatusConflict, Code: "conn_taken",
		Message: "the site named this new connection after a connection that already exists; it was not bound", Err: err}
}

// afterIdentity applies what the site declared while serving a frame: a new
// connection is bound, a login rebinds. served is the worker that ran the
// frame; if the person lives elsewhere, that worker forgets the connection.
func (f *Front) afterIdentity(ctx context.Context, w http.ResponseWriter, rt placement.Route, known bool, served string, id *protocol.Identity) (placement.Route, error) {
	if id == nil || id.Conn == "" {
		return rt, nil
	}
	var err error
	oldUser := rt.User
	switch {
	case !known:
		rt, err = f.cfg.Directory.Connect(ctx, id.Conn, id.User, served)
		if errors.Is(err, placement.ErrConnTaken) {
			// Someone else's connection has this name: the newcomer does
			// not get it, and its worker lets it go.
			go f.release(served, id.Conn, protocol.AnonymousUser(id.Conn))
			return rt, errConnTaken(err)
		}
		if err != nil {
			return rt, &HTTPError{Status: http.StatusServiceUnavailable, Message: "could not register the connection; retry", Retry: true, Err: err}
		}
		oldUser = protocol.AnonymousUser(id.Conn)
		if id.User != "" && len(id.Attributes) > 0 {
			// Logged in on the first request: record the attributes too.
			if rt, _, err = f.cfg.Directory.Login(ctx, rt.Conn, id.User, id.Attributes); err != nil {
				return rt, &HTTPError{Status: http.StatusServiceUnavailable, Message: "could not record the login; retry", Retry: true, Err: err}
			}
		}
		if w != nil {
			f.setCookie(w, id.Conn, rt.User)
		}
	case id.User != "" && (id.User != rt.User || len(id.Attributes) > 0):
		rt, _, err = f.cfg.Directory.Login(ctx, rt.Conn, id.User, id.Attributes)
		if err != nil {
			return rt, &HTTPError{Status: http.StatusServiceUnavailable, Message: "could not record the login; retry", Retry: true, Err: err}
		}
		if w != nil && rt.User != oldUser {
			// The person changed: the cookie is issued again, bound to
			// them, and every cookie of the connection before names
			// nobody (a planted one included).
			f.setCookie(w, id.Conn, rt.User)
		}
	default:
		return rt, nil
	}
	if rt.Worker != served {
		// The person already lives on another worker: the connection joins
		// them there, and the worker that served this frame lets it go.
		go f.release(served, id.Conn, oldUser)
	}
	return rt, nil
}

func (f *Front) release(worker, conn, user string) {
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.FrameTimeout)
	defer cancel()
	_, err := f.call(ctx, worker, &protocol.Frame{User: user, Conn: conn, Kind: &protocol.Frame_Release{Release: &protocol.Release{}}}, f.cfg.FrameTimeout)
	if err != nil {
		f.log.Warn("releasing connection on its former worker", "conn", conn, "worker", worker, "error", err)
	}
}
