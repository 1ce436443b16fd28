// Package counter is the smallest complete stickyd application: a page with a
// counter and a list of notes, a login route and an identity route. The
// end-to-end tests and the benchmarks run it; it is also a readable example
// of the worker SDK. It must stay deterministic: tests compare its page trees
// with a reference model.
package counter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stickyd/stickyd/plugins/worker"
)

// App is the counter application.
type App struct{}

var _ worker.App = App{}

// New returns the application.
func New() App { return App{} }

// needs are the backends its routes and ops need (docs/maintenance.md): an
// order (the "order" op, the /orders route) writes to db-a; the rest needs
// no backend.
var needs = new(worker.Needs).
	Route("/orders", "db-a").
	Op("order", "db-a")

// Needs implements worker.Dependent.
func (App) Needs() *worker.Needs { return needs }

// ServeHTTP serves /, /whoami and POST /login?user=NAME[&attr=value...]:
// every other query parameter of the login is an attribute of the person
// (team=canary), which group assignment rules can match.
func (App) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := worker.SessionFrom(r.Context())
	if s == nil {
		http.Error(w, "not running under stickyd", http.StatusInternalServerError)
		return
	}
	switch {
	case r.URL.Path == "/":
		fmt.Fprintf(w, "counter: connection %s on %s\n", s.Conn(), s.WorkerID())
	case r.URL.Path == "/setcookie":
		// A site's own cookie, set on whatever response (a new
		// connection's first one included): it goes beside the front's.
		http.SetCookie(w, &http.Cookie{Name: "site_pref", Value: "dark", Path: "/"})
		fmt.Fprintln(w, s.Conn())
	case r.URL.Path == "/orders":
		fmt.Fprintf(w, "orders: connection %s on %s\n", s.Conn(), s.WorkerID())
	case r.URL.Path == "/whoami":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"conn": s.Conn(), "user": s.User(), "worker": s.WorkerID()})
	case r.URL.Path == "/login" && r.Method == http.MethodPost:
		q := r.URL.Query()
		attrs := map[string]string{}
		for k := range q {
			if k != "user" {
				attrs[k] = q.Get(k)
			}
		}
		if err := s.LoginWith(q.Get("user"), attrs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"user": s.User(), "worker": s.WorkerID()})
	case r.URL.Path == "/logout" && r.Method == http.MethodPost:
		// A logout forgets the person everywhere, once this is answered.
		s.Forget()
		fmt.Fprintln(w, "logged out")
	case r.URL.Path == "/name" && s.IsNew():
		// Lets a test name its connection the way a site would.
		if err := s.NameConnection(r.URL.Query().Get("conn")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, s.Conn())
	default:
		http.NotFound(w, r)
	}
}

// OpenPage starts a page with a zero counter.
func (App) OpenPage(ctx context.Context, p *worker.Page) error {
	return p.Tree().Set("count", 0)
}

type message struct {
	Op    string          `json:"op"`
	Table string          `json:"table"`
	Key   string          `json:"key"`
	Paths []string        `json:"paths"`
	Lease int             `json:"lease_ms"`
	Text  string          `json:"text"`
	Bytes int             `json:"bytes"`
	Ms    int             `json:"ms"`
	V     json.RawMessage `json:"v"`
}

// leaked is memory the leak op holds for the life of the process: a worker
// bloating, as a cache that never evicts would.
var leaked struct {
	sync.Mutex
	chunks [][]byte
}

// Message handles inc, order (an inc of "orders" that needs db-a), note,
// fill, grid and edit (a table of rows and the small edits a live tab
// makes to it), leak, echo, stall and panic, and for
// tables: sub (subscribe the page to table), pub (publish a change of table
// with v), cache (cache v under key, marked with table); for the AI
// gateway: ask (text to model "small", charged to the person) and
// ask_stream (the same, streamed into the page tree at "answer").
func (App) Message(ctx context.Context, p *worker.Page, raw json.RawMessage) (any, error) {
	var m message
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("decoding message: %w", err)
	}
	t := p.Tree()
	switch m.Op {
	case "inc":
		n := t.Number("count") + 1
		if err := t.Set("count", n); err != nil {
			return nil, err
		}
		return map[string]any{"count": n, "worker": p.Session().WorkerID()}, nil
	case "order":
		// An inc that needs db-a: it waits out db-a's maintenance windows.
		n := t.Number("orders") + 1
		if err := t.Set("orders", n); err != nil {
			return nil, err
		}
		return map[string]any{"orders": n, "worker": p.Session().WorkerID(), "at": time.Now().UnixNano()}, nil
	case "note":
		// Notes append one entry each: the page receives exactly one delta
		// per note, so order and completeness can be checked.
		n := int(t.Number("notes"))
		if err := t.Set("note/"+strconv.Itoa(n), m.Text); err != nil {
			return nil, err
		}
		if err := t.Set("notes", n+1); err != nil {
			return nil, err
		}
		return n + 1, nil
	case "fill":
		if m.Bytes < 0 || m.Bytes > 256<<20 {
			return nil, errors.New("fill: bytes must be 0..256 MiB")
		}
		if err := t.Set("blob", strings.Repeat("x", m.Bytes)); err != nil {
			return nil, err
		}
		return m.Bytes, nil
	case "grid":
		if m.Bytes < 0 || m.Bytes > 256<<20 {
			return nil, errors.New("grid: bytes must be 0..256 MiB")
		}
		return m.Bytes, setGrid(t, m.Bytes)
	case "edit":
		v, err := editGrid(t)
		if err != nil {
			return nil, err
		}
		return map[string]any{"version": v}, nil
	case "leak":
		// Grows the worker, not the page: what the person's state does not
		// hold is left behind when they move.
		if m.Bytes < 0 || m.Bytes > 64<<20 {
			return nil, errors.New("leak: bytes must be 0..64 MiB")
		}
		b := make([]byte, m.Bytes)
		for i := range b {
			b[i] = byte(i)
		}
		leaked.Lock()
		leaked.chunks = append(leaked.chunks, b)
		leaked.Unlock()
		return m.Bytes, nil
	case "sub":
		return nil, p.Subscribe(m.Table)
	case "pub":
		return nil, worker.Publish(ctx, m.Table, m.V)
	case "cache":
		return p.Cached(m.Key, []string{m.Table}, func() (any, error) { return m.V, nil })
	case "sget":
		return worker.Get(ctx, m.Paths...)
	case "sincr":
		// Read-modify-write of a shared counter at Key under a grant on
		// Paths (which must hold Key).
		return incr(ctx, m.Key, m.Paths, time.Duration(m.Lease)*time.Millisecond, 0)
	case "sincrget":
		// An sincr, then a read of Key on this worker: read your writes
		// says the read sees the commit.
		n, err := incr(ctx, m.Key, m.Paths, time.Duration(m.Lease)*time.Millisecond, 0)
		if err != nil {
			return nil, err
		}
		vals, err := worker.Get(ctx, m.Key)
		if err != nil {
			return nil, err
		}
		var read float64
		_ = json.Unmarshal(vals[m.Key], &read)
		return map[string]any{"wrote": n, "read": read}, nil
	case "sincrpub":
		// An sincr, then a publish of the new value on Table: a
		// subscriber reads Key when it hears (OnTableChange, tables
		// "rw-…") and must see at least that value.
		n, err := incr(ctx, m.Key, m.Paths, time.Duration(m.Lease)*time.Millisecond, 0)
		if err != nil {
			return nil, err
		}
		return n, worker.Publish(ctx, m.Table, map[string]any{"key": m.Key, "v": n})
	case "slate":
		// The same with a pause of Ms between the grant and the commit:
		// past the lease, the commit must be refused.
		if m.Ms < 0 || m.Ms > 60000 {
			return nil, errors.New("slate: ms must be 0..60000")
		}
		return incr(ctx, m.Key, m.Paths, time.Duration(m.Lease)*time.Millisecond, time.Duration(m.Ms)*time.Millisecond)
	case "shold":
		// Takes a grant and keeps it: it ends with its lease, its worker
		// or its person's move.
		g, err := worker.Acquire(ctx, m.Paths, time.Duration(m.Lease)*time.Millisecond)
		if err != nil {
			return nil, err
		}
		return g.Token, nil
	case "ask":
		// The call holds this person's mailbox until the answer comes.
		resp, err := p.Gateway().Complete(ctx, askRequest(m.Text))
		if err != nil {
			return nil, err
		}
		return map[string]any{"answer": resp.Content, "cost_micros": resp.CostMicros}, nil
	case "ask_stream":
		return askStream(ctx, p, m.Text)
	case "echo":
		return m.V, nil
	case "panic":
		panic("counter: asked to panic")
	case "print":
		// Writes a line to stdout and one to stderr, as an app's own
		// output (a print, a library's complaint) does: the host logs
		// them.
		fmt.Fprintln(os.Stdout, "stdout: "+m.Text)
		fmt.Fprintln(os.Stderr, "stderr: "+m.Text)
		return true, nil
	case "stall":
		// Holds the person's mailbox, as a slow handler would; tests use it
		// to make a freeze wait.
		if m.Ms < 0 || m.Ms > 60000 {
			return nil, errors.New("stall: ms must be 0..60000")
		}
		select {
		case <-time.After(time.Duration(m.Ms) * time.Millisecond):
		case <-ctx.Done():
		}
		return m.Ms, nil
	default:
		return nil, fmt.Errorf("unknown op %q", m.Op)
	}
}

// GridRowBytes is about what one row of a grid takes encoded as JSON, so a
// grid of N bytes has N / GridRowBytes rows. The benchmarks' peers
// (test/bench/peers) build the same rows.
const GridRowBytes = 100

// draftMax is how long the grid's draft grows before it starts again.
const draftMax = 200

// setGrid makes the page a grid of about size bytes: rows of about
// GridRowBytes each (at least one), an empty draft and version 0.
func setGrid(t *worker.Tree, size int) error {
	rows := make([]any, max(1, size/GridRowBytes))
	for i := range rows {
		rows[i] = map[string]any{
			"id":   i,
			"name": fmt.Sprintf("customer-%06d", i),
			"qty":  i % 17,
			"note": "a row of the benchmark's grid, about 100 bytes",
		}
	}
	if err := t.Set("rows", rows); err != nil {
		return err
	}
	if err := t.Set("draft", ""); err != nil {
		return err
	}
	return t.Set("version", 0)
}

// editGrid is the small edit a live tab makes, in three writes: one row's
// qty (the row the version picks), the draft one letter longer (empty again
// past draftMax), and the version one higher, which it returns. It is
// deterministic: the same edits give the same tree and the same deltas.
func editGrid(t *worker.Tree) (int, error) {
	rows := t.Len("rows")
	if rows == 0 {
		return 0, errors.New("edit: the page has no grid (send grid first)")
	}
	v := int(t.Number("version"))
	if err := t.Set(fmt.Sprintf("rows/%d/qty", v%rows), v); err != nil {
		return 0, err
	}
	draft := t.String("draft") + "x"
	if len(draft) > draftMax {
		draft = ""
	}
	if err := t.Set("draft", draft); err != nil {
		return 0, err
	}
	if err := t.Set("version", v+1); err != nil {
		return 0, err
	}
	return v + 1, nil
}

// OnTableChange counts the changes each table brought the page, and notes
// when the last one arrived (unix nanoseconds) and what it said.
func (App) OnTableChange(ctx context.Context, p *worker.Page, c worker.TableChange) error {
	t := p.Tree()
	if strings.HasPrefix(c.Table, "rw-") {
		return readBack(ctx, t, c)
	}
	if err := t.Set("heard/"+c.Table, t.Number("heard/"+c.Table)+1); err != nil {
		return err
	}
	if err := t.Set("heard_at/"+c.Table, float64(time.Now().UnixNano())); err != nil {
		return err
	}
	var v any
	if len(c.Data) > 0 {
		_ = json.Unmarshal(c.Data, &v)
	}
	return t.Set("heard_data/"+c.Table, v)
}

// readBack reads the key a "rw-" table change names and counts, in the
// tree, the reads that saw less than the value published (stale reads).
func readBack(ctx context.Context, t *worker.Tree, c worker.TableChange) error {
	var d struct {
		Key string  `json:"key"`
		V   float64 `json:"v"`
	}
	if err := json.Unmarshal(c.Data, &d); err != nil {
		return err
	}
	vals, err := worker.Get(ctx, d.Key)
	if err != nil {
		return err
	}
	var read float64
	_ = json.Unmarshal(vals[d.Key], &read)
	if read < d.V {
		if err := t.Set("rw_stale", t.Number("rw_stale")+1); err != nil {
			return err
		}
	}
	return t.Set("rw_heard", t.Number("rw_heard")+1)
}

// incr adds one to the number at key of the global store under a grant on
// paths, pausing pause before the commit, and returns the new value.
func incr(ctx context.Context, key string, paths []string, lease, pause time.Duration) (any, error) {
	g, err := worker.Acquire(ctx, paths, lease)
	if err != nil {
		return nil, err
	}
	var n float64
	if b, ok := g.Values[key]; ok {
		if err := json.Unmarshal(b, &n); err != nil {
			_ = g.Release(ctx)
			return nil, fmt.Errorf("%s holds %s, not a number", key, b)
		}
	}
	if pause > 0 {
		time.Sleep(pause)
	}
	if err := g.Commit(ctx, map[string]any{key: n + 1}); err != nil {
		return nil, err
	}
	return n + 1, nil
}

// askModel is the gateway's model the ask ops use.
const askModel = "small"

func askRequest(text string) worker.GatewayRequest {
	return worker.GatewayRequest{Model: askModel, Messages: []worker.GatewayMessage{{Role: "user", Content: text}}}
}

// askStream streams the answer to text into the page tree at "answer",
// one delta per piece, and returns the whole answer with its usage.
func askStream(ctx context.Context, p *worker.Page, text string) (any, error) {
	// Leaving early cancels the stream (and ends its goroutine).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := p.Gateway().Stream(ctx, askRequest(text))
	if err != nil {
		return nil, err
	}
	var answer strings.Builder
	var last worker.GatewayChunk
	for c := range ch {
		if c.Err != nil {
			return nil, c.Err
		}
		if c.Delta != "" {
			answer.WriteString(c.Delta)
			if err := p.Tree().Set("answer", answer.String()); err != nil {
				return nil, err
			}
		}
		last = c
	}
	if !last.Done {
		return nil, errors.New("ask_stream: the stream ended without its last piece")
	}
	return map[string]any{"answer": answer.String(), "output_tokens": last.Usage.Output}, nil
}
