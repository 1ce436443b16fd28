package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// procMetric reads one unlabelled metric of an agent process.
func procMetric(t *testing.T, admin, name string) float64 {
	t.Helper()
	code, body := adminDo(t, admin, "GET", "/v1/metrics", "")
	if code != 200 {
		t.Fatalf("GET /metrics: HTTP %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// More idle keep-alive connections than the agent's file limit allows: the
// front holds what its bound lets it (derived from the limit, leaving files
// for everything else), answers the others 503 (and their health checks
// 200), the admin API and the front's health keep answering within a
// second throughout, a person keeps typing (checkpoints keep being
// written), and the idle connections are closed after idle_timeout.
func TestFrontAtItsFileLimit(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Fatalf("this test runs the agent under prlimit (util-linux): %v", err)
	}
	limit, flood, idle := 1200, 1600, 8*time.Second
	if os.Getenv("STICKYD_SOAK") == "full" {
		// The figures (make soak-front): 25,000 connections at an
		// agent limited to 20,000 files. This process holds its side of
		// the connections the front serves (at most its bound, 16,000:
		// those refused are closed at once), and a few thousand more.
		// Their flood takes longer than 8 s: the idle connections must
		// outlast it for the front to be seen at its bound.
		limit, flood, idle = 20_000, 25_000, time.Minute
		need := uint64(limit - min(max(limit/5, 256), 10000) + 2048)
		var rl syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Fatal(err)
		}
		if rl.Cur < need {
			rl.Cur = min(need, rl.Max)
			_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
			if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < need {
				t.Skipf("this process may open %d files; it needs %d (a root shell can raise the hard limit)", rl.Cur, need)
			}
		}
	}
	p := newProcSpec(t, procSpec{workers: 1, name: "a", expect: 1, nofile: limit,
		front: fmt.Sprintf("  idle_timeout = %q\n", idle.String()), group: "  checkpoint_interval = \"500ms\"\n"})
	p.start() // killed at the end if the test fails before its stop

	want := float64(limit - min(max(limit/5, 256), 10000)) // the files kept aside
	max := procMetric(t, p.admin, "stickyd_front_connections_max")
	if max != want {
		t.Fatalf("front bound %v under a file limit of %d, want %v", max, limit, want)
	}

	// Headers past max_header_bytes (64 KiB by default) are refused.
	req, _ := http.NewRequest("GET", "http://"+p.front+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("h", 100<<10))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("100 KiB of headers: %v, want HTTP 431", errOrStatus(err, resp))
	}

	// A person types throughout; their page is checkpointed twice a second.
	b := newBrowserAt(t, "http://"+p.front)
	if code, body := b.do("GET", "/"); code != 200 {
		t.Fatalf("GET /: %d %s", code, body)
	}
	tb := b.openTab("p1")
	stop := make(chan struct{})
	typed := make(chan int, 1)
	go func() {
		n := 0
		defer func() { typed <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			a, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
			if err != nil || a.Op != "reply" {
				t.Errorf("the typist's inc %d: %v %+v", n+1, err, a)
				return
			}
			n++
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// The watchers: the admin API and the front's health, each on a
	// connection of its own, every 100 ms, within a second.
	var slow []string
	var slowMu sync.Mutex
	watch := func(what, url string) {
		c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			began := time.Now()
			resp, err := c.Get(url)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if err != nil || resp.StatusCode != 200 || time.Since(began) > time.Second {
				slowMu.Lock()
				slow = append(slow, fmt.Sprintf("%s after %v: %v", what, time.Since(began), errOrStatus(err, resp)))
				slowMu.Unlock()
			}
		}
	}
	var wg sync.WaitGroup
	for what, url := range map[string]string{"admin health": "http://" + p.admin + "/v1/agent/health", "front health": "http://" + p.front + "/_stickyd/health"} {
		wg.Add(1)
		go func() { defer wg.Done(); watch(what, url) }()
	}

	// The flood: idle keep-alive connections, each after one request.
	var served, refused, failed atomic.Int64
	conns := make([]net.Conn, flood)
	sem := make(chan struct{}, 32)
	var fw sync.WaitGroup
	for i := range flood {
		sem <- struct{}{}
		fw.Add(1)
		go func() {
			defer fw.Done()
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", p.front, 5*time.Second)
			if err != nil {
				failed.Add(1)
				return
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			path := "/"
			if i%2 == 0 {
				path = "/_stickyd/client.js" // an asset: no person is made
			}
			_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				failed.Add(1)
				c.Close()
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				served.Add(1)
				_ = c.SetDeadline(time.Time{})
				conns[i] = c
			case http.StatusServiceUnavailable:
				refused.Add(1)
				c.Close()
			default:
				failed.Add(1)
				c.Close()
			}
		}()
	}
	fw.Wait()
	held := procMetric(t, p.admin, "stickyd_front_connections")
	refusedCount := procMetric(t, p.admin, "stickyd_front_connections_refused_total")
	t.Logf("%d connections: %d served and held, %d refused with 503, %d failed; the front holds %v (bound %v), counted %v refusals",
		flood, served.Load(), refused.Load(), failed.Load(), held, max, refusedCount)
	if failed.Load() != 0 {
		t.Errorf("%d connections failed (neither served nor refused)", failed.Load())
	}
	if refused.Load() == 0 || float64(served.Load()) > max {
		t.Errorf("%d served past a bound of %v, %d refused", served.Load(), max, refused.Load())
	}
	if held > max {
		t.Errorf("the front holds %v connections, past its bound %v", held, max)
	}
	// A newcomer at the limit is refused, clearly.
	resp, err := http.Get("http://" + p.front + "/")
	if err != nil {
		t.Fatalf("a newcomer at the limit: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 && resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a newcomer at the limit: HTTP %d, want 200 or 503", resp.StatusCode)
	}

	// The idle connections are closed after idle_timeout; newcomers are
	// served again.
	deadline := time.Now().Add(idle + 22*time.Second)
	for procMetric(t, p.admin, "stickyd_front_connections") > 50 && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	if n := procMetric(t, p.admin, "stickyd_front_connections"); n > 50 {
		t.Fatalf("%v connections still held %v after the flood, with idle_timeout %v", n, idle+22*time.Second, idle)
	}
	if code, _ := newBrowserAt(t, "http://"+p.front).do("GET", "/"); code != 200 {
		t.Fatalf("a newcomer after the idle connections closed: HTTP %d", code)
	}
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	close(stop)
	wg.Wait()
	n := <-typed
	if n < 20 {
		t.Errorf("the typist made %d incs", n)
	}
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("stopping the agent: %v", err)
	}
	log := p.out.String()
	for _, bad := range []string{"too many open files", "checkpoint round", "journaling the checkpoint index"} {
		if strings.Contains(log, bad) {
			t.Errorf("the agent's log says %q", bad)
		}
	}
	slowMu.Lock()
	defer slowMu.Unlock()
	if len(slow) > 0 {
		t.Fatalf("%d checks were slow or failed, the first: %s", len(slow), slow[0])
	}
}

func errOrStatus(err error, resp *http.Response) string {
	if err != nil {
		return err.Error()
	}
	return "HTTP " + strconv.Itoa(resp.StatusCode)
}

// Requests that name nobody leave no trace: a HEAD, a GET of a static
// asset or answered with an error (a crawler's probe) get no cookie and
// add nobody to the maps; a page view does, once.
func TestAnonymousRequestsLeaveNoTrace(t *testing.T) {
	a := startAgentWith(t, "subprocess", 2)
	before := len(a.Supervisor().Users())
	c := &http.Client{Timeout: 10 * time.Second}
	for i := range 30 {
		for _, rq := range []struct{ method, path string }{
			{"HEAD", "/"}, {"GET", "/robots.txt"}, {"GET", "/assets/app.css"}, {"GET", "/wp-login.php"},
			{"GET", fmt.Sprintf("/static/%d.png", i)},
		} {
			req, _ := http.NewRequest(rq.method, "http://"+a.Addr()+rq.path, nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", rq.method, rq.path, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if len(resp.Cookies()) != 0 {
				t.Fatalf("%s %s set a cookie: %v", rq.method, rq.path, resp.Cookies())
			}
		}
	}
	if n := len(a.Supervisor().Users()); n != before {
		t.Fatalf("150 requests that name nobody left %d people in the maps", n-before)
	}
	b := newBrowser(t, a)
	if code, _ := b.do("GET", "/"); code != 200 || b.cookie() == "" {
		t.Fatalf("a page view: HTTP %d, cookie %q", code, b.cookie())
	}
	if n := len(a.Supervisor().Users()); n != before+1 {
		t.Fatalf("a page view left %d people in the maps, want 1", n-before)
	}
	// With the cookie, an asset is the person's as before.
	if code, _ := b.do("GET", "/style.css"); code != 404 {
		t.Fatalf("GET /style.css with a cookie: HTTP %d", code)
	}
	if n := len(a.Supervisor().Users()); n != before+1 {
		t.Fatalf("the person's own asset request changed the maps to %d people", n-before)
	}
}
