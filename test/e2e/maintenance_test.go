package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// typed is one answered message of a typing loop.
type typed struct {
	sent, answered time.Time
	value          int
}

// typist sends op to its page in a loop until stop closes, checking that
// the counter the op bumps (key) answers one higher each time: nothing lost,
// nothing doubled, in order.
type typist struct {
	op, key string
	tab     *tab
	mu      sync.Mutex // guards log and err
	log     []typed
	err     error
	done    chan struct{}
}

func startTypist(t *testing.T, b *browser, page, op, key string, stop <-chan struct{}) *typist {
	if code, body := b.do("GET", "/"); code != http.StatusOK {
		t.Fatalf("loading the site: %d %s", code, body)
	}
	ty := &typist{op: op, key: key, tab: b.openTab(page), done: make(chan struct{})}
	go func() {
		defer close(ty.done)
		for n := 1; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			sent := time.Now()
			a, err := ty.tab.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": op}})
			if err == nil && (a.Op != "reply" || a.Error != "") {
				err = fmt.Errorf("%s %d refused: %s (code %s, retry %v)", op, n, a.Error, a.Code, a.Retry)
			}
			var v map[string]any
			if err == nil {
				if err = json.Unmarshal(a.Data, &v); err == nil && v[key] != float64(n) {
					err = fmt.Errorf("%s %d answered %s = %v (lost or doubled?)", op, n, key, v[key])
				}
			}
			ty.mu.Lock()
			if err != nil {
				ty.err = err
				ty.mu.Unlock()
				return
			}
			ty.log = append(ty.log, typed{sent: sent, answered: time.Now(), value: n})
			ty.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return ty
}

func (ty *typist) result() ([]typed, error) {
	<-ty.done
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return ty.log, ty.err
}

func (ty *typist) count() int {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return len(ty.log)
}

// A 5 s window on db-a hides the maintenance: people placing orders (which
// need db-a) wait and go on when it ends, in order, with no failure; people
// typing (which needs nothing) are untouched and keep working throughout.
// The waiting requests are visible in the API, the monitor and /metrics.
// Once with Go workers, once with Python workers.
func TestMaintenanceWindowIsHidden(t *testing.T) {
	eachRuntime(t, testMaintenanceWindowIsHidden)
}

func testMaintenanceWindowIsHidden(t *testing.T, app option) {
	a := startAgentWith(t, "subprocess", 2, app)
	stop := make(chan struct{})
	var orderers, typists []*typist
	for i := range 4 {
		orderers = append(orderers, startTypist(t, newBrowser(t, a), fmt.Sprintf("o%d", i), "order", "orders", stop))
		typists = append(typists, startTypist(t, newBrowser(t, a), fmt.Sprintf("t%d", i), "inc", "count", stop))
	}
	time.Sleep(500 * time.Millisecond)

	code, body := adminCall(t, a, "PUT", "/v1/maintenance/db-a", testToken, `{"reason":"upgrading","max_wait":"30s"}`)
	if code != http.StatusOK {
		t.Fatalf("starting the window: %d %s", code, body)
	}
	opened := time.Now()
	typedBefore := 0
	for _, ty := range typists {
		typedBefore += ty.count()
	}
	// The held orders are counted (the probes run every 2 s).
	waitFor(t, 10*time.Second, "the API counting the held orders", func() bool {
		_, body := adminCall(t, a, "GET", "/v1/maintenance", testToken, "")
		var v struct {
			Backends []struct {
				Backend string `json:"backend"`
				Waiting int64  `json:"waiting"`
			} `json:"backends"`
		}
		return json.Unmarshal([]byte(body), &v) == nil && len(v.Backends) == 1 && v.Backends[0].Backend == "db-a" && v.Backends[0].Waiting >= 1
	})
	if _, m := adminCall(t, a, "GET", "/metrics", "", ""); !strings.Contains(m, `stickyd_maintenance_waiting{backend="db-a"`) {
		t.Errorf("/metrics has no stickyd_maintenance_waiting series for db-a")
	}
	time.Sleep(time.Until(opened.Add(5 * time.Second)))
	typedDuring := -typedBefore
	for _, ty := range typists {
		typedDuring += ty.count()
	}
	ending := time.Now()
	code, body = adminCall(t, a, "DELETE", "/v1/maintenance/db-a", testToken, "")
	if code != http.StatusOK {
		t.Fatalf("ending the window: %d %s", code, body)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)

	// Orders: none failed, each counted once in order (checked as they
	// came), and every order sent while the window was open (the API
	// answers once the workers know) was answered only after it ended.
	held := 0
	for i, ty := range orderers {
		log, err := ty.result()
		if err != nil {
			t.Fatalf("orderer %d: %v", i, err)
		}
		for _, e := range log {
			if e.sent.After(opened) && e.sent.Before(ending) && e.answered.Before(ending) {
				t.Errorf("orderer %d: order %d sent %s into the window was answered before it ended", i, e.value, e.sent.Sub(opened))
			}
			if e.sent.Before(ending) && !e.answered.Before(ending) {
				held++ // waited through the window's end
			}
		}
		if log[len(log)-1].sent.Before(ending) {
			t.Errorf("orderer %d placed no order after the window", i)
		}
	}
	if held == 0 {
		t.Fatal("no order was held through the window")
	}
	// Typing: none failed, and it went on during the window.
	var lat []time.Duration
	for i, ty := range typists {
		log, err := ty.result()
		if err != nil {
			t.Fatalf("typist %d: %v", i, err)
		}
		for _, e := range log {
			if e.sent.After(opened) && e.sent.Before(ending) {
				lat = append(lat, e.answered.Sub(e.sent))
			}
		}
	}
	if typedDuring == 0 || len(lat) == 0 {
		t.Fatal("nobody typed during the window: the window made victims")
	}
	slices.Sort(lat)
	t.Logf("window 5 s: %d orders held and answered after it, 0 failed; %d messages typed during it, p50 %s, p99 %s (no backend: not held)",
		held, typedDuring, lat[len(lat)/2], lat[len(lat)*99/100])
}

// A window longer than its max wait: the held order is refused as
// retryable (WebSocket error code "maintenance", HTTP 503 + Retry-After),
// counted, and nothing was half done: the next order after the window
// counts one. Once with Go workers, once with Python workers.
func TestMaintenanceWaitIsBounded(t *testing.T) {
	waits(t)
	eachRuntime(t, testMaintenanceWaitIsBounded)
}

func testMaintenanceWaitIsBounded(t *testing.T, app option) {
	a := startAgentWith(t, "subprocess", 1, app)
	b := newBrowser(t, a)
	if code, body := b.do("GET", "/"); code != http.StatusOK {
		t.Fatalf("loading the site: %d %s", code, body)
	}
	tb := b.openTab("p")
	if code, body := adminCall(t, a, "PUT", "/v1/maintenance/db-a", testToken, `{"max_wait":"1s"}`); code != http.StatusOK {
		t.Fatalf("starting the window: %d %s", code, body)
	}
	start := time.Now()
	ans := tb.op(map[string]any{"op": "msg", "data": map[string]any{"op": "order"}})
	if ans.Op != "error" || ans.Code != "maintenance" || !ans.Retry {
		t.Fatalf("an order past the max wait: %+v", ans)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("refused after %s, before the max wait", waited)
	}
	// What needs nothing runs at once.
	if a := tb.send(map[string]any{"op": "inc"}); !strings.Contains(string(a.Data), `"count":1`) {
		t.Fatalf("inc during the window: %s", a.Data)
	}
	// A route that needs db-a: 503 with Retry-After.
	req, _ := http.NewRequest("GET", "http://"+a.Addr()+"/orders", nil)
	req.Header.Set("Cookie", b.cookie())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "5" {
		t.Fatalf("GET /orders during the window: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	waitFor(t, 10*time.Second, "the refusals counted", func() bool {
		_, body := adminCall(t, a, "GET", "/v1/maintenance", testToken, "")
		var v struct {
			Backends []struct {
				TimedOut uint64 `json:"timed_out"`
			} `json:"backends"`
		}
		return json.Unmarshal([]byte(body), &v) == nil && len(v.Backends) == 1 && v.Backends[0].TimedOut >= 2
	})
	if code, body := adminCall(t, a, "DELETE", "/v1/maintenance/db-a", testToken, ""); code != http.StatusOK {
		t.Fatalf("ending the window: %d %s", code, body)
	}
	if a := tb.send(map[string]any{"op": "order"}); !strings.Contains(string(a.Data), `"orders":1`) {
		t.Fatalf("the first order after the window: %s", a.Data)
	}
	if code, _ := adminCall(t, a, "DELETE", "/v1/maintenance/db-a", testToken, ""); code != http.StatusNotFound {
		t.Fatalf("ending a window twice: %d, want 404", code)
	}
	if code, _ := adminCall(t, a, "PUT", "/v1/maintenance/DB!", testToken, ""); code != http.StatusBadRequest {
		t.Fatalf("a bad backend name: %d, want 400", code)
	}
}

// An agent stopped while a maintenance window holds a site request answers
// it 503 with Retry-After; the connection is never just closed. Once with
// Go workers, once with Python workers.
func TestStopAnswersRequestsAWindowHolds(t *testing.T) {
	eachRuntime(t, testStopAnswersRequestsAWindowHolds)
}

func testStopAnswersRequestsAWindowHolds(t *testing.T, app option) {
	a := startAgentWith(t, "subprocess", 1, app)
	b := newBrowser(t, a)
	if code, body := b.do("GET", "/"); code != http.StatusOK {
		t.Fatalf("loading the site: %d %s", code, body)
	}
	if code, body := adminCall(t, a, "PUT", "/v1/maintenance/db-a", testToken, `{"max_wait":"60s"}`); code != http.StatusOK {
		t.Fatalf("starting the window: %d %s", code, body)
	}
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+a.Addr()+"/orders", nil)
		req.Header.Set("Cookie", b.cookie())
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		got <- result{resp, err}
	}()
	waitFor(t, 10*time.Second, "the request held by the window", func() bool {
		_, body := adminCall(t, a, "GET", "/v1/maintenance", testToken, "")
		var v struct {
			Backends []struct {
				Waiting int64 `json:"waiting"`
			} `json:"backends"`
		}
		return json.Unmarshal([]byte(body), &v) == nil && len(v.Backends) == 1 && v.Backends[0].Waiting >= 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the held request was cut: %v", r.err)
	}
	if r.resp.StatusCode != http.StatusServiceUnavailable || r.resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the held request got %d, Retry-After %q; want 503 with Retry-After", r.resp.StatusCode, r.resp.Header.Get("Retry-After"))
	}
}
