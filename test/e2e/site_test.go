package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/plugins/examples/site"
	"github.com/stickyd/stickyd/plugins/worker"
)

// The site's pool in these tests: small, so that a test can fill it.
const (
	sitePoolWorkers = 4
	sitePoolQueue   = 8
)

// siteApp is the example site as the "site" workers serve it, with one
// route of the tests' own: POST /e2e/echo answers the request's body.
func siteApp() worker.App {
	mux := http.NewServeMux()
	mux.Handle("/", site.New())
	mux.HandleFunc("POST /e2e/echo", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = io.Copy(w, r.Body)
	})
	// /e2e/stream?n=N writes N lines 300 ms apart, flushing each: "i
	// UNIXNANO" (when it was written).
	mux.HandleFunc("GET /e2e/stream", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Type", "text/plain")
		for i := range n {
			if i > 0 {
				select {
				case <-time.After(300 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprintf(w, "%d %d\n", i, time.Now().UnixNano())
			if err := http.NewResponseController(w).Flush(); err != nil {
				return
			}
		}
	})
	// /e2e/events is a server-sent events stream of three ticks.
	mux.HandleFunc("GET /e2e/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		for i := range 3 {
			fmt.Fprintf(w, "id: %d\nevent: tick\ndata: {\"n\":%d}\n\n", i, i)
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})
	// /e2e/cookies answers the Cookie headers it got, one per line, and
	// sets cookies the way frameworks write them (quoted, with a comma, a
	// space and non-ASCII bytes).
	mux.HandleFunc("GET /e2e/cookies", func(w http.ResponseWriter, r *http.Request) {
		for _, c := range siteOddSetCookies {
			w.Header().Add("Set-Cookie", c)
		}
		_, _ = io.WriteString(w, strings.Join(r.Header.Values("Cookie"), "\n"))
	})
	return worker.Site(mux, worker.SiteOptions{Workers: sitePoolWorkers, QueueMax: sitePoolQueue})
}

type siteCart struct {
	Conn, User, Worker string
	Items              []string
}

func (b *browser) cart() siteCart {
	b.t.Helper()
	code, body := b.do("GET", "/cart.json")
	if code != 200 {
		b.t.Fatalf("cart: %d %s", code, body)
	}
	var c siteCart
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		b.t.Fatalf("cart: %v: %s", err, body)
	}
	return c
}

func (b *browser) post(path, form string) {
	b.t.Helper()
	if code, body := b.doForm(path, form); code != http.StatusSeeOther {
		b.t.Fatalf("POST %s %s: %d %s", path, form, code, body)
	}
}

// An unmodified net/http site behind stickyd: each visitor's cookie always
// reaches the same worker and their cart; a signed-in visitor moved between
// workers (the admin API) keeps their cart, and the site goes on.
func TestSiteCartsStickAndMove(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgentWith(t, mode, 2, withDataDir(t), withApp("site"))
			type shopper struct {
				b     *browser
				user  string
				items []string
				home  string
			}
			var shoppers []*shopper
			for i := range 4 {
				b := newBrowser(t, a)
				if code, body := b.do("GET", "/"); code != 200 || !strings.Contains(body, "The cart is empty") {
					t.Fatalf("first visit: %d %s", code, body)
				}
				s := &shopper{b: b, user: fmt.Sprintf("shopper%d", i)}
				b.post("/login", "user="+s.user)
				for _, item := range []string{"apple", "pear"} {
					item = fmt.Sprintf("%s-%d", item, i)
					b.post("/add", "item="+item)
					s.items = append(s.items, item)
				}
				s.home = b.cart().Worker
				shoppers = append(shoppers, s)
			}
			check := func(s *shopper) {
				t.Helper()
				for range 5 {
					c := s.b.cart()
					if c.Worker != s.home || c.User != s.user || !slices.Equal(c.Items, s.items) {
						t.Fatalf("%s (at home on %s) got %+v, want items %v", s.user, s.home, c, s.items)
					}
				}
				code, page := s.b.do("GET", "/")
				if code != 200 || !strings.Contains(page, "<li>"+s.items[len(s.items)-1]+"</li>") || !strings.Contains(page, s.user) {
					t.Fatalf("%s's page: %d %s", s.user, code, page)
				}
			}
			homes := map[string]bool{}
			for _, s := range shoppers {
				check(s)
				homes[s.home] = true
			}
			if len(homes) != 2 {
				t.Fatalf("the shoppers live on %v; placement should have used both workers", homes)
			}
			// There and back again: the cart is in the session, which moves.
			s := shoppers[0]
			for range 2 {
				to := otherWorker(a.Pool().Ready(), s.home)
				code, body := adminCall(t, a, "POST", "/v1/users/"+s.user+"/move", testToken, `{"to":"`+to+`"}`)
				if code != 200 || !strings.Contains(body, `"outcome":"moved"`) {
					t.Fatalf("move of %s to %s: %d %s", s.user, to, code, body)
				}
				s.home = to
				check(s)
				s.b.post("/add", "item=plum")
				s.items = append(s.items, "plum")
				check(s)
			}
			for _, other := range shoppers[1:] {
				check(other)
			}
		})
	}
}

// A body of 8 MiB crosses the front and a subprocess worker's channel both
// ways.
func TestSiteBigBodies(t *testing.T) {
	a := startAgentWith(t, "subprocess", 1, withApp("site"))
	b := newBrowser(t, a)
	b.cart()
	big := make([]byte, 8<<20)
	_, _ = rand.Read(big)
	resp, err := b.http.Post(b.base+"/e2e/echo", "application/octet-stream", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, big) {
		t.Fatalf("8 MiB echo: %d, %d bytes back, %v", resp.StatusCode, len(got), err)
	}
}

// The point of the site's own pool: while slow requests fill it and its
// queue (and more are refused, 503 with Retry-After), the worker answers its
// probes on time — GET /v1/workers shows last_probe advancing every interval
// and a probe taken while the queue was full — and is never killed for
// silence.
func TestSiteProbesOnTimeWhileSaturated(t *testing.T) {
	const interval = 300 * time.Millisecond
	a := startAgentWith(t, "subprocess", 1, withApp("site"), func(c *agent.Config) {
		c.Probe = &agent.ProbeConfig{Interval: interval.String(), Misses: 3}
	})
	// Three times what the pool holds, each a person of their own (one
	// person has at most one request in the pool).
	var people []*browser
	for range 3 * (sitePoolWorkers + sitePoolQueue) {
		b := newBrowser(t, a)
		b.cart()
		people = append(people, b)
	}
	id := people[0].cart().Worker
	workerInfo := func() host.WorkerInfo {
		t.Helper()
		code, body := adminCall(t, a, "GET", "/v1/workers", testToken, "")
		var ws []host.WorkerInfo
		if err := json.Unmarshal([]byte(body), &ws); code != 200 || err != nil {
			t.Fatalf("GET /v1/workers: %d %v %s", code, err, body)
		}
		for _, w := range ws {
			if w.ID == id {
				return w
			}
		}
		t.Fatalf("worker %s not listed: %s", id, body)
		return host.WorkerInfo{}
	}
	waitFor(t, 10*time.Second, "a first probe", func() bool { return !workerInfo().LastProbe.IsZero() })

	var served, refused, noRetryAfter atomic.Int64
	var mu sync.Mutex // guards odd
	var odd []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, b := range people {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := b.http.Get(b.base + "/slow?ms=600")
				if err != nil {
					mu.Lock()
					odd = append(odd, err.Error())
					mu.Unlock()
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					served.Add(1)
				case http.StatusServiceUnavailable:
					refused.Add(1)
					if resp.Header.Get("Retry-After") == "" {
						noRetryAfter.Add(1)
					}
					// Paces the retries of a refused person; not a wait
					// for anything.
					time.Sleep(100 * time.Millisecond)
				default:
					mu.Lock()
					odd = append(odd, resp.Status)
					mu.Unlock()
				}
			}
		}()
	}

	// Watch the worker for a dozen probe intervals.
	var probes []time.Time
	var maxStale time.Duration
	var maxWaiting int64
	for end := time.Now().Add(12 * interval); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		w := workerInfo()
		if n := len(probes); n == 0 || w.LastProbe.After(probes[n-1]) {
			probes = append(probes, w.LastProbe)
			maxWaiting = max(maxWaiting, w.Mailbox)
		}
		maxStale = max(maxStale, time.Since(w.LastProbe))
	}
	close(stop)
	wg.Wait()

	if len(odd) > 0 {
		t.Fatalf("unexpected answers under load: %v", odd)
	}
	if served.Load() == 0 || refused.Load() == 0 || noRetryAfter.Load() != 0 {
		t.Fatalf("load: %d served, %d refused (%d without Retry-After); want both, all with Retry-After",
			served.Load(), refused.Load(), noRetryAfter.Load())
	}
	if maxWaiting < sitePoolQueue {
		t.Fatalf("no probe was taken with the pool's queue full (most waiting: %d, queue %d)", maxWaiting, sitePoolQueue)
	}
	if maxStale > 3*interval || len(probes) < 8 {
		t.Fatalf("probes late under load: %d readings in %v, oldest reading %v old (interval %v)",
			len(probes), 12*interval, maxStale, interval)
	}
	w := workerInfo()
	if w.ProbeFailures != 0 || w.Incarnation != 1 || w.State != host.StateReady || w.HowDied != "" {
		t.Fatalf("worker after the load: %+v", w)
	}
	t.Logf("%d served, %d refused; %d probe readings, oldest %v, most waiting %d",
		served.Load(), refused.Load(), len(probes), maxStale, maxWaiting)
}

// siteOddSetCookies are the cookies /e2e/cookies sets.
var siteOddSetCookies = []string{
	`cart="apple\054pear"; Path=/`,
	`spaced="a b"; Path=/`,
	`name=Zoë; Path=/`,
}

// A net/http site streams through stickyd (issue 43): each flushed block
// reaches the client when it is written (the first line arrives before the
// last is produced), server-sent events arrive as events, and the person's
// other requests are served while a stream runs. The site's cookies pass
// unchanged both ways: the Cookie header with a comma, a space, a quote
// and non-ASCII bytes reaches the site as the browser sent it (without
// stickyd's own cookie), and Set-Cookie headers reach the browser as the
// site wrote them.
func TestSiteStreamsAndCookies(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgentWith(t, mode, 1, withApp("site"))
			b := newBrowser(t, a)
			b.cart()

			checkStreamed(t, b, "/e2e/stream?n=4", func() {
				if c := b.cart(); c.Conn == "" {
					t.Fatalf("a request beside the stream: %+v", c)
				}
			})
			checkEvents(t, b, "/e2e/events")

			// A client that leaves mid-stream: the front cancels the stream
			// in the worker and counts how it ended.
			resp, err := b.http.Get(b.base + "/e2e/stream?n=50")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			waitFor(t, 20*time.Second, "the streams counted", func() bool {
				_, m := adminCall(t, a, "GET", "/v1/metrics", testToken, "")
				return strings.Contains(m, `stickyd_front_site_streams_ended_total{how="whole"} 2`) &&
					strings.Contains(m, `stickyd_front_site_streams_ended_total{how="client_left"} 1`) &&
					strings.Contains(m, "stickyd_front_site_streams 0")
			})

			const sent = `plain=1; cart="apple\054pear"; spaced=a b; quote="x\"y"; name=Zoë`
			req, _ := http.NewRequest("GET", b.base+"/e2e/cookies", nil)
			req.Header.Set("Cookie", sent) // the jar adds stickyd's after it
			resp, err = b.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(got) != sent {
				t.Fatalf("the site got the Cookie header %q, want %q", got, sent)
			}
			for _, c := range siteOddSetCookies {
				if !slices.Contains(resp.Header.Values("Set-Cookie"), c) {
					t.Fatalf("Set-Cookie %q did not reach the browser unchanged: %q", c, resp.Header.Values("Set-Cookie"))
				}
			}
		})
	}
}

// A person with a 9 s site request running is moved, by `user move` and by
// a drain (issue 43): the move waits for the request (answered where it
// ran), then hands the person over, instead of rolling back after
// freeze_timeout; a request they send meanwhile waits and is served. Their
// cart moves with them.
func TestSiteMoveWaitsForASlowRequest(t *testing.T) {
	waits(t)
	a := startAgentWith(t, "subprocess", 2, withApp("site"))
	b := newBrowser(t, a)
	b.cart()
	b.post("/login", "user=slowpoke")
	b.post("/add", "item=anvil")
	slowThenMove := func(move func(from, to string) (int, string)) {
		t.Helper()
		from := b.cart().Worker
		to := otherWorker(a.Pool().Ready(), from)
		answered := make(chan string, 1)
		start := time.Now()
		go func() {
			code, body := b.do("GET", "/slow?ms=9000")
			answered <- fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
		}()
		time.Sleep(time.Second) // the request is in the app
		// A request the person sends while the move waits is held on the
		// barrier (default barrier_wait: move.request_wait), then served.
		held := make(chan int, 1)
		go func() {
			time.Sleep(time.Second)
			code, _ := b.do("GET", "/cart.json")
			held <- code
		}()
		code, body := move(from, to)
		if code != 200 || !strings.Contains(body, `"outcome":"moved"`) {
			t.Fatalf("moving slowpoke off %s with a request in the app: %d %s", from, code, body)
		}
		if got := <-answered; got != "200 slept 9000 ms" {
			t.Fatalf("the slow request: %q", got)
		}
		if code := <-held; code != 200 {
			t.Fatalf("a request sent during the move: %d", code)
		}
		if waited := time.Since(start); waited < 9*time.Second {
			t.Fatalf("the move answered after %v, before the request ended", waited)
		}
		if c := b.cart(); c.Worker != to || c.User != "slowpoke" || !slices.Equal(c.Items, []string{"anvil"}) {
			t.Fatalf("after the move: %+v, want slowpoke's anvil on %s", c, to)
		}
	}
	slowThenMove(func(_, to string) (int, string) {
		return adminCall(t, a, "POST", "/v1/users/slowpoke/move", testToken, `{"to":"`+to+`"}`)
	})
	slowThenMove(func(from, _ string) (int, string) {
		// A drain answers a line per person, then its totals.
		code, body := adminCall(t, a, "POST", "/v1/workers/"+from+"/drain", testToken, "")
		if !strings.Contains(body, `"failed":0`) {
			t.Fatalf("the drain: %s", body)
		}
		return code, body
	})
}

// checkStreamed reads path, a streamed response of 4 lines "I UNIXNANO"
// (when the site wrote line I), as a browser does, and fails unless the
// first line arrived before the last was written. beside runs once the
// first line is here, while the stream goes on.
func checkStreamed(t *testing.T, b *browser, path string, beside func()) {
	t.Helper()
	resp, err := b.http.Get(b.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	var arrived []time.Time
	var written []int64
	for lines.Scan() {
		arrived = append(arrived, time.Now())
		var i int
		var at int64
		if _, err := fmt.Sscanf(lines.Text(), "%d %d", &i, &at); err != nil || i != len(written) {
			t.Fatalf("%s: line %q (%v)", path, lines.Text(), err)
		}
		written = append(written, at)
		if i == 0 && beside != nil {
			beside()
		}
	}
	if lines.Err() != nil || len(written) != 4 || resp.StatusCode != 200 {
		t.Fatalf("%s: %d, %d lines, %v", path, resp.StatusCode, len(written), lines.Err())
	}
	if !arrived[0].Before(time.Unix(0, written[3])) {
		t.Fatalf("%s: the first line arrived at %v, after the last was written (%v): the response was not streamed",
			path, arrived[0], time.Unix(0, written[3]))
	}
}

// checkEvents reads path, a server-sent events stream of three ticks.
func checkEvents(t *testing.T, b *browser, path string) {
	t.Helper()
	resp, err := b.http.Get(b.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("%s: Content-Type %q", path, ct)
	}
	events, err := io.ReadAll(resp.Body)
	want := "id: 0\nevent: tick\ndata: {\"n\":0}\n\nid: 1\nevent: tick\ndata: {\"n\":1}\n\nid: 2\nevent: tick\ndata: {\"n\":2}\n\n"
	if err != nil || string(events) != want {
		t.Fatalf("%s: %q %v", path, events, err)
	}
}

// A stream crosses agents: the browser's front is one agent's, the
// person's worker another's; the reads of the rest of the body travel the
// peer link to the worker that answered, and each block still arrives as
// it is written.
func TestSiteStreamsAcrossAgents(t *testing.T) {
	ps, leader := startClusterSpec(t, 2, func(int) procSpec { return procSpec{workers: 1, app: "site"} })
	b := procBrowser(t, ps[0])
	b.cart()
	b.post("/login", "user=streamer")
	if w := b.cart().Worker; w != "s2.web-1" {
		if code, body := adminPost(t, ps[leader].admin, "/v1/users/streamer/move", `{"to":"s2.web-1"}`); code != 200 {
			t.Fatalf("moving streamer to s2.web-1: %d %s", code, body)
		}
	}
	if w := b.cart().Worker; w != "s2.web-1" {
		t.Fatalf("streamer is on %s, want s2.web-1 behind s1's front", w)
	}
	checkStreamed(t, b, "/e2e/stream?n=4", nil)
	checkEvents(t, b, "/e2e/events")
}
