package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	consulapi "github.com/hashicorp/consul/api"
)

// A typist is a person at a counter page who keeps typing through
// whatever the operator does: when their front goes away they reconnect
// through another front Consul lists (same cookie, same page); a refusal
// that says retry is retried within retryFor (the barrier of a move, a
// front's start); every answer is checked against the count the page must
// have, so a lost or restarted page fails. An inc whose answer was lost
// with its connection may have run: the next answer may then be one
// higher, and is counted as ambiguous, never as a loss.
type typist struct {
	user   string
	consul *consulapi.Client
	jar    http.CookieJar
	http   *http.Client
	ws     *websocket.Conn
	front  string
	next   uint64
	count  int
	opened bool
	// doubt is set while an inc's answer was lost with its connection.
	doubt bool

	done, retries, reconnects, ambiguous atomic.Int64
	worker                               atomic.Pointer[string]
}

// retryFor bounds how long one inc keeps retrying: a retryable refusal
// (barrier_wait, 30 s by default) or a front being replaced.
const retryFor = 45 * time.Second

// typists is everyone typing at once.
type typists struct {
	all  []*typist
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex // guards err
	err  error
}

func startTypists(t *testing.T, cc *consulapi.Client, n int) *typists {
	t.Helper()
	ts := &typists{stop: make(chan struct{})}
	for i := range n {
		jar, _ := cookiejar.New(nil)
		ty := &typist{user: fmt.Sprintf("person-%02d", i), consul: cc, jar: jar,
			http: &http.Client{Jar: jar, Timeout: 20 * time.Second}}
		if err := ty.connect(i); err != nil {
			t.Fatalf("%s: %v", ty.user, err)
		}
		ts.all = append(ts.all, ty)
	}
	for _, ty := range ts.all {
		ts.wg.Add(1)
		go func() {
			defer ts.wg.Done()
			for {
				select {
				case <-ts.stop:
					return
				default:
				}
				if err := ty.inc(); err != nil {
					ts.mu.Lock()
					if ts.err == nil {
						ts.err = fmt.Errorf("%s: %w", ty.user, err)
					}
					ts.mu.Unlock()
					return
				}
				time.Sleep(25 * time.Millisecond)
			}
		}()
	}
	t.Cleanup(ts.halt)
	return ts
}

func (ts *typists) halt() {
	select {
	case <-ts.stop:
	default:
		close(ts.stop)
	}
	ts.wg.Wait()
	for _, ty := range ts.all {
		if ty.ws != nil {
			ty.ws.Close()
		}
	}
}

func (ts *typists) failure() error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.err
}

// waitEach waits until every typist has had n more incs answered, failing
// the test on the first failure.
func (ts *typists) waitEach(t *testing.T, n int64, within time.Duration) {
	t.Helper()
	target := make([]int64, len(ts.all))
	for i, ty := range ts.all {
		target[i] = ty.done.Load() + n
	}
	deadline := time.Now().Add(within)
	for {
		if err := ts.failure(); err != nil {
			t.Fatalf("a person's typing failed: %v", err)
		}
		behind := ""
		for i, ty := range ts.all {
			if ty.done.Load() < target[i] {
				behind = ty.user
				break
			}
		}
		if behind == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("typing stalled: %s has not typed %d more within %s", behind, n, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stats sums the typists' counters.
func (ts *typists) stats() (done, retries, reconnects, ambiguous int64) {
	for _, ty := range ts.all {
		done += ty.done.Load()
		retries += ty.retries.Load()
		reconnects += ty.reconnects.Load()
		ambiguous += ty.ambiguous.Load()
	}
	return
}

// where is each person's worker, as their last answer said.
func (ts *typists) where() map[string]string {
	out := map[string]string{}
	for _, ty := range ts.all {
		if w := ty.worker.Load(); w != nil {
			out[ty.user] = *w
		}
	}
	return out
}

// fronts lists the passing stickyd-front instances.
func (ty *typist) fronts() ([]string, error) {
	entries, _, err := ty.consul.Health().Service("stickyd-front", "", true, nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		host := e.Service.Address
		if host == "" {
			host = e.Node.Address
		}
		out = append(out, fmt.Sprintf("%s:%d", host, e.Service.Port))
	}
	slices.Sort(out)
	return out, nil
}

// connect opens the page through a front Consul lists (the pick-th,
// modulo), logging in on the first connection.
func (ty *typist) connect(pick int) error {
	fronts, err := ty.fronts()
	if err != nil || len(fronts) == 0 {
		return fmt.Errorf("no front in Consul (%v)", err)
	}
	front := fronts[pick%len(fronts)]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	get := func(method, path string) error {
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+front+path, nil)
		resp, err := ty.http.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s on %s: HTTP %d", method, path, front, resp.StatusCode)
		}
		return nil
	}
	if !ty.opened {
		if err := get("GET", "/"); err != nil {
			return err
		}
		if err := get("POST", "/login?user="+url.QueryEscape(ty.user)); err != nil {
			return err
		}
	}
	u, _ := url.Parse("http://" + front)
	h := http.Header{}
	for _, c := range ty.jar.Cookies(u) {
		h.Add("Cookie", c.Name+"="+c.Value)
	}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.DialContext(ctx, "ws://"+front+"/_stickyd/ws", h)
	if err != nil {
		return fmt.Errorf("dialing %s: %w", front, err)
	}
	ty.ws, ty.front = ws, front
	a, err := ty.call(map[string]any{"op": "open", "kind": "counter"})
	if err != nil {
		ws.Close()
		ty.ws = nil
		return err
	}
	if a.Error != "" {
		ws.Close()
		ty.ws = nil
		return fmt.Errorf("open refused on %s: %s (retry %v)", front, a.Error, a.Retry)
	}
	ty.opened = true
	return nil
}

type reply struct {
	Op     string `json:"op"`
	ID     uint64 `json:"id"`
	Worker string `json:"worker"`
	Error  string `json:"error"`
	Retry  bool   `json:"retry"`
	Code   string `json:"code"`
	Data   struct {
		Count *int `json:"count"`
	} `json:"data"`
}

// call sends one op and reads its answer; a broken connection is an error.
func (ty *typist) call(m map[string]any) (*reply, error) {
	ty.next++
	m["id"], m["page"] = ty.next, "typing"
	_ = ty.ws.SetWriteDeadline(time.Now().Add(20 * time.Second))
	if err := ty.ws.WriteJSON(m); err != nil {
		return nil, err
	}
	_ = ty.ws.SetReadDeadline(time.Now().Add(40 * time.Second))
	for {
		_, b, err := ty.ws.ReadMessage()
		if err != nil {
			return nil, err
		}
		var a reply
		if err := json.Unmarshal(b, &a); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", b, err)
		}
		if a.ID == ty.next {
			return &a, nil
		}
		// An answer to an op of a connection before (a late one): skip.
	}
}

// inc types one character and checks the page's count.
func (ty *typist) inc() error {
	deadline := time.Now().Add(retryFor)
	var last string
	for attempt := 0; ; attempt++ {
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %s (last: %s)", retryFor, last)
		}
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if ty.ws == nil {
			if err := ty.connect(attempt + int(ty.next)); err != nil {
				last = "reconnecting: " + err.Error()
				continue
			}
			ty.reconnects.Add(1)
		}
		a, err := ty.call(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
		if err != nil {
			// The connection went (a front replaced): the inc may have run.
			ty.ws.Close()
			ty.ws, ty.doubt, last = nil, true, "connection: "+err.Error()
			continue
		}
		if a.Error != "" {
			if a.Retry || a.Code == "unavailable" {
				ty.retries.Add(1)
				last = fmt.Sprintf("refused %s: %s", a.Code, a.Error)
				continue
			}
			return fmt.Errorf("inc refused on %s: code %q: %s", ty.front, a.Code, a.Error)
		}
		if a.Data.Count == nil {
			return fmt.Errorf("inc on %s answered without a count", ty.front)
		}
		got, want := *a.Data.Count, ty.count+1
		switch {
		case got == want:
		case ty.doubt && got == want+1:
			ty.ambiguous.Add(1) // the inc whose answer was lost had run
		default:
			return fmt.Errorf("count %d on %s (worker %s), want %s: the page's state was lost or doubled",
				got, ty.front, a.Worker, strconv.Itoa(want)+map[bool]string{true: " or one more", false: ""}[ty.doubt])
		}
		ty.count, ty.doubt = got, false
		w := a.Worker
		ty.worker.Store(&w)
		ty.done.Add(1)
		return nil
	}
}
