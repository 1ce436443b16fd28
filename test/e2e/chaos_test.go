package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The chaos suite: people type notes through the fronts of a three-server
// cluster (two subprocess workers each) while faults are injected one after
// another: a worker SIGKILLed, a worker SIGSTOPped, the raft leader
// SIGKILLed, a host (a follower server with its workers) SIGKILLed, and
// every server restarted in turn. Each is started again where the fault
// left it down; and, where network namespaces can be made (root and
// iproute2), a server is cut off from the others and from the people for
// 5 s. At the end every page is compared with its reference model.
//
// It reports sessions lost, requests that failed after their retries,
// deltas lost or duplicated, pages reset by a crash (a worker that died
// took the page's state since its last checkpoint with it: the page comes
// back from that checkpoint, or clean, with a notice; such a page is
// counted here and is not a lost delta), and how long the typing took to
// recover after each fault.
//
// STICKYD_CHAOS_DURATION sets how long faults are injected (default 20 s:
// the short form in the default test run; `make chaos` runs 10 minutes);
// STICKYD_CHAOS_USERS the number of people (default 12).
func TestChaos(t *testing.T) {
	d := 20 * time.Second
	if v := os.Getenv("STICKYD_CHAOS_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("STICKYD_CHAOS_DURATION: %v", err)
		}
	}
	users := envInt("STICKYD_CHAOS_USERS", 12)
	c := startChaosCluster(t, 3, 2)

	people := make([]*chaosPerson, users)
	for i := range people {
		people[i] = c.newPerson(t, "chaos"+strconv.Itoa(i))
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, p := range people {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.type_(c, stop)
		}()
	}

	faults := []struct {
		name string
		do   func() error
	}{
		{"SIGKILL a worker", c.killWorker},
		{"drain a worker (one set on the road)", c.drainWorker},
		{"SIGKILL the raft leader", func() error { return c.killServer(true) }},
		{"SIGSTOP a worker for 3 s", c.stopWorker},
		{"SIGKILL a host", func() error { return c.killServer(false) }},
		{"restart every server in turn", c.restartAll},
	}
	if c.net != nil {
		faults = append(faults[:3], append([]struct {
			name string
			do   func() error
		}{{"cut a server off for 5 s", c.partition}}, faults[3:]...)...)
	} else {
		t.Log("chaos: network namespaces cannot be made here (root and iproute2 are needed): no partition")
	}
	type outcome struct {
		fault    string
		at       time.Duration
		recovery time.Duration
		err      error
	}
	var outcomes []outcome
	start := time.Now()
	for i := 0; time.Since(start) < d; i++ {
		f := faults[i%len(faults)]
		before := make([]int64, len(people))
		for k, p := range people {
			before[k] = p.acked.Load()
		}
		at := time.Since(start)
		err := f.do()
		// Recovered when every person has had an answer since the fault.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ok := true
			for k, p := range people {
				if p.acked.Load() <= before[k] {
					ok = false
				}
			}
			if ok || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		rec := time.Since(start) - at
		outcomes = append(outcomes, outcome{f.name, at, rec, err})
		t.Logf("chaos: %-30s at %6s: recovered in %s (err %v)", f.name, at.Round(time.Second), rec.Round(time.Millisecond), err)
		time.Sleep(time.Second)
	}
	close(stop)
	wg.Wait()

	// The report.
	var acked, resets, unannounced, lostToResets, retried, failed int64
	for _, p := range people {
		acked += p.acked.Load()
		resets += p.resets.Load()
		unannounced += p.unannounced.Load()
		lostToResets += p.lostToResets.Load()
		retried += p.retried.Load()
		failed += p.failed.Load()
	}
	byFault := map[string][]time.Duration{}
	for _, o := range outcomes {
		if o.err != nil {
			t.Errorf("fault %q: %v", o.fault, o.err)
		}
		byFault[o.fault] = append(byFault[o.fault], o.recovery)
	}
	t.Logf("chaos: %d faults in %s; %d people typed %d notes; %d retried, %d failed after retries",
		len(outcomes), time.Since(start).Round(time.Second), users, acked, retried, failed)
	t.Logf("chaos: %d pages reset by a crash (%d on a tab that had no delta of the page to announce it on); %d acknowledged notes went with the dead workers' memory",
		resets, unannounced, lostToResets)
	for _, f := range faults {
		rs := byFault[f.name]
		if len(rs) == 0 {
			continue
		}
		slices.Sort(rs)
		t.Logf("chaos: recovery after %-30s n=%d median %s max %s", f.name+":", len(rs), rs[len(rs)/2].Round(time.Millisecond), rs[len(rs)-1].Round(time.Millisecond))
	}

	// The invariants: every session survived, no request failed for good,
	// and every page equals its reference model with its deltas in order.
	lostSessions := 0
	for _, p := range people {
		if err := p.err(); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
		w, err := c.whoami(p)
		if err != nil || w.User != p.name {
			lostSessions++
			t.Errorf("%s: session lost: whoami %+v %v", p.name, w, err)
		}
		if err := p.check(c); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
	}
	t.Logf("chaos: %d sessions lost; deltas lost or duplicated: checked on every page and every pull", lostSessions)
	if c.moving > 0 {
		t.Logf("chaos: %d people moved by drains in %v: %.0f moves/s", c.moved, c.moving.Round(time.Millisecond), float64(c.moved)/c.moving.Seconds())
	}
	if failed > 0 {
		t.Errorf("%d requests failed after their retries", failed)
	}
}

// chaosGroup is more configuration for the servers' group.
const chaosGroup = ""

// chaosCluster is the servers under test; live says which run now.
type chaosCluster struct {
	t     *testing.T
	net   *chaosNet // nil where network namespaces cannot be made
	ps    []*proc
	mu    sync.Mutex // guards live, moved, moving
	live  []bool
	names []string
	// moved and moving sum the drains' moves and their time.
	moved  int
	moving time.Duration
}

func startChaosCluster(t *testing.T, n, workers int) *chaosCluster {
	// One cookie key for every front: a person can come back through any.
	key := filepath.Join(t.TempDir(), "cookie.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("chaos-cookie-key-", 4)), 0o600); err != nil {
		t.Fatal(err)
	}
	net := newChaosNet(t)
	// Mutual TLS on the raft and peer-link ports, certificates from
	// stickyd tls: the faults are survived with it on.
	tlsBlock := clusterTLS(t)
	ps, _ := startClusterSpec(t, n, func(i int) procSpec {
		sp := procSpec{workers: workers, front: fmt.Sprintf("  cookie_key_file = %q\n", key), group: chaosGroup, extra: []string{tlsBlock}}
		if net != nil {
			// The last server runs in its own network namespace, to be
			// cut off; the others listen on the host's side of its link.
			sp.ip = net.hostIP
			if i == n-1 {
				sp.ip, sp.netns = net.nsIP, net.ns
			}
		}
		return sp
	})
	c := &chaosCluster{t: t, ps: ps, live: make([]bool, n), net: net}
	for i := range ps {
		c.live[i] = true
		c.names = append(c.names, "s"+strconv.Itoa(i+1))
	}
	return c
}

// front returns the front of a live server, chosen at random.
func (c *chaosCluster) front() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var up []string
	for i, p := range c.ps {
		if c.live[i] {
			up = append(up, p.front)
		}
	}
	if len(up) == 0 {
		return c.ps[0].front
	}
	return up[rand.IntN(len(up))]
}

func (c *chaosCluster) setLive(i int, up bool) {
	c.mu.Lock()
	c.live[i] = up
	c.mu.Unlock()
}

// leader returns the index of the leading server, or -1.
func (c *chaosCluster) leader() int {
	for i, p := range c.ps {
		if !c.isLive(i) {
			continue
		}
		if s, ok := status(c.t, p); ok && s.Leader != "" {
			return slices.Index(c.names, s.Leader)
		}
	}
	return -1
}

func (c *chaosCluster) isLive(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live[i]
}

// worker picks a ready worker process of a live server.
func (c *chaosCluster) worker() (pid int, id string, err error) {
	var all []struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Pid   int    `json:"pid"`
	}
	for i, p := range c.ps {
		if !c.isLive(i) {
			continue
		}
		code, body := adminCallAtQuiet(p.admin, "GET", "/v1/monitor/local", testToken)
		if code != http.StatusOK {
			continue
		}
		var v struct {
			Workers []struct {
				ID    string `json:"id"`
				State string `json:"state"`
				Pid   int    `json:"pid"`
			} `json:"workers"`
		}
		if json.Unmarshal([]byte(body), &v) != nil {
			continue
		}
		for _, w := range v.Workers {
			if w.State == "ready" && w.Pid > 0 {
				all = append(all, w)
			}
		}
	}
	if len(all) == 0 {
		return 0, "", errors.New("no ready worker to hurt")
	}
	w := all[rand.IntN(len(all))]
	return w.Pid, w.ID, nil
}

// drainWorker moves everyone off a worker through the leader, as one set
// on the road, and counts the moves and their time.
func (c *chaosCluster) drainWorker() error {
	_, id, err := c.worker()
	if err != nil {
		return err
	}
	l := c.leader()
	if l < 0 {
		return errors.New("no leader to drain through")
	}
	start := time.Now()
	code, body := adminCallAtQuiet(c.ps[l].admin, "POST", "/v1/workers/"+id+"/drain", testToken)
	took := time.Since(start)
	if code != http.StatusOK {
		return fmt.Errorf("draining %s: %d %s", id, code, body)
	}
	lines := strings.Split(strings.TrimSpace(body), "\n")
	var last struct {
		Done *struct {
			Users, Moved, Failed int
		} `json:"done"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Done == nil {
		return fmt.Errorf("draining %s: no summary in %q", id, lines[len(lines)-1])
	}
	c.mu.Lock()
	c.moved += last.Done.Moved
	c.moving += took
	c.mu.Unlock()
	c.t.Logf("chaos: drained %s: %d of %d people moved in %v (%.0f moves/s), %d failed",
		id, last.Done.Moved, last.Done.Users, took.Round(time.Millisecond), float64(last.Done.Moved)/took.Seconds(), last.Done.Failed)
	return nil
}

func (c *chaosCluster) killWorker() error {
	pid, _, err := c.worker()
	if err != nil {
		return err
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

func (c *chaosCluster) stopWorker() error {
	pid, _, err := c.worker()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	// The host may have replaced it meanwhile; a SIGCONT to a process
	// killed since is harmless.
	_ = syscall.Kill(pid, syscall.SIGCONT)
	return nil
}

// killServer SIGKILLs the leader (or a follower: a host with its
// workers), waits for the others to carry on, and starts it again.
func (c *chaosCluster) killServer(leader bool) error {
	l := c.leader()
	if l < 0 {
		return errors.New("no leader to find")
	}
	victim := l
	if !leader {
		victim = (l + 1 + rand.IntN(len(c.ps)-1)) % len(c.ps)
	}
	p := c.ps[victim]
	c.setLive(victim, false)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	time.Sleep(2 * time.Second)
	p.launch()
	p.waitHealthy()
	c.setLive(victim, true)
	return nil
}

// restartAll stops every server in turn with SIGTERM (people are parked)
// and starts it again.
func (c *chaosCluster) restartAll() error {
	for i, p := range c.ps {
		c.setLive(i, false)
		if err := p.stop(syscall.SIGTERM); err != nil {
			var ee interface{ ExitCode() int }
			if !errors.As(err, &ee) {
				return fmt.Errorf("stopping %s: %w", c.names[i], err)
			}
		}
		p.launch()
		p.waitHealthy()
		c.setLive(i, true)
	}
	return nil
}

func (c *chaosCluster) whoami(p *chaosPerson) (whoami, error) {
	req, _ := http.NewRequest("GET", "http://"+c.front()+"/whoami", nil)
	req.Header.Set("Cookie", "stickyd_conn="+p.cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return whoami{}, err
	}
	defer resp.Body.Close()
	var w whoami
	err = json.NewDecoder(resp.Body).Decode(&w)
	return w, err
}

// chaosPerson types notes on one page, through whichever front is up.
type chaosPerson struct {
	name   string
	cookie string
	tb     *tab

	model        []string     // the notes the page holds (type_, then check)
	pending      string       // the note in flight, if its answer was lost
	acked        atomic.Int64 // notes the page acknowledged
	resets       atomic.Int64 // pages reset by a crash
	unannounced  atomic.Int64 // of which the tab had no delta to announce it on
	lostToResets atomic.Int64 // acknowledged notes those resets took
	retried      atomic.Int64
	failed       atomic.Int64
	mu           sync.Mutex
	first        error
}

func (c *chaosCluster) newPerson(t *testing.T, name string) *chaosPerson {
	b := newBrowserAt(t, "http://"+c.front())
	if code, body := b.do("POST", "/login?user="+name); code != http.StatusOK {
		t.Fatalf("login of %s: %d %s", name, code, body)
	}
	p := &chaosPerson{name: name, cookie: b.cookie()}
	p.tb = &tab{t: t, b: b, page: "chaos", kind: "counter", tree: map[string]any{}}
	if err := p.connect(c); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *chaosPerson) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.first == nil {
		p.first = err
	}
}

func (p *chaosPerson) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first
}

// connect opens a WebSocket on a live front and opens the page again,
// resuming after the last delta applied.
func (p *chaosPerson) connect(c *chaosCluster) error {
	if p.tb.ws != nil {
		p.tb.ws.Close()
	}
	front := c.front()
	h := http.Header{}
	h.Add("Cookie", "stickyd_conn="+p.cookie)
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial("ws://"+front+"/_stickyd/ws", h)
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return fmt.Errorf("websocket to %s: %w (HTTP %d %s)", front, err, resp.StatusCode, strings.TrimSpace(string(body)))
		}
		return fmt.Errorf("websocket to %s: %w", front, err)
	}
	p.tb.ws = ws
	p.tb.b.base = "http://" + front
	a, err := p.tb.tryOp(map[string]any{"op": "open", "kind": p.tb.kind, "after": p.tb.last})
	if err != nil {
		return err
	}
	if a.Op != "reply" || a.Opened == nil {
		return fmt.Errorf("open: %+v", a)
	}
	if a.Opened.Resync {
		p.tb.tree, p.tb.last = map[string]any{}, a.Opened.Base
	}
	if a.Opened.Notice != "" {
		p.tb.notices = append(p.tb.notices, a.Opened.Notice)
	}
	return nil
}

// errDeltas marks a delta lost or duplicated (not a broken connection).
var errDeltas = errors.New("deltas lost or duplicated")

// count brings the tab up to date and returns the page's notes.
func (p *chaosPerson) count() (int, error) {
	for {
		n, err := p.tb.tryPull(0)
		if err != nil {
			if strings.Contains(err.Error(), "gap:") || strings.Contains(err.Error(), "old delta") {
				return 0, fmt.Errorf("%w: %v", errDeltas, err)
			}
			return 0, err
		}
		if n == 0 {
			break
		}
	}
	v, _ := p.tb.tree["notes"].(float64)
	return int(v), nil
}

// type_ sends note after note until stop closes, keeping the reference
// model of the page: the text of every note it holds, in order. A broken
// connection or a retryable refusal is retried (through another front if
// need be); a page found gone is opened again, and the page's count then
// says whether the note in flight landed. A page holding fewer notes than
// the model is only allowed when a crash reset it (a notice says so); the
// model is cut back to it and the loss counted.
func (p *chaosPerson) type_(c *chaosCluster, stop <-chan struct{}) {
	var (
		sent int // notes sent, for unique texts
		seen int // notices already accounted for
	)
	pending := &p.pending // the note in flight, if its answer was lost
	// cut brings the model back to a page holding got notes after a
	// crash; announced says whether a notice came with it.
	cut := func(got int, announced, noDelta bool) error {
		switch {
		case announced:
		case noDelta:
			// The tab had no delta of this page yet (its notes were
			// acknowledged, their deltas not pulled): it opened the page
			// "after 0", which to a worker that lost the page is a new
			// page, so it could not announce the loss.
			p.unannounced.Add(1)
		default:
			return fmt.Errorf("the page holds %d notes, %d were acknowledged, and no reset was announced", got, len(p.model))
		}
		p.resets.Add(1)
		p.lostToResets.Add(int64(len(p.model) - got))
		p.model = p.model[:got]
		return nil
	}
	resync := func() bool {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			select {
			case <-stop:
				return false
			default:
			}
			had := p.tb.last
			err := p.connect(c)
			var got int
			if err == nil {
				got, err = p.count()
			}
			if errors.Is(err, errDeltas) {
				p.fail(err)
				return false
			}
			if err == nil {
				announced := len(p.tb.notices) > seen
				seen = len(p.tb.notices)
				switch {
				case got == len(p.model)+1 && *pending != "":
					p.model = append(p.model, *pending) // the lost answer's note landed
				case got == len(p.model):
				case got < len(p.model):
					if err := cut(got, announced, had == 0); err != nil {
						p.fail(err)
						return false
					}
				default:
					p.fail(fmt.Errorf("the page holds %d notes, only %d were sent", got, len(p.model)+1))
					return false
				}
				*pending = ""
				return true
			}
			if time.Now().After(deadline) {
				p.failed.Add(1)
				p.fail(fmt.Errorf("no way back to the page for 2 minutes: %v", err))
				return false
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		text := strconv.Itoa(sent)
		sent++
		*pending = text
		ans, err := p.tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "note", "text": text}})
		if err == nil && ans.Op == "reply" && ans.Error == "" {
			*pending = ""
			var got int
			if err := json.Unmarshal(ans.Data, &got); err != nil || got < 1 || got > len(p.model)+1 {
				p.fail(fmt.Errorf("note %q: the page counted %s, the model holds %d", text, ans.Data, len(p.model)))
				return
			}
			if got <= len(p.model) {
				// The note ran on a page restored from a checkpoint
				// (older than the model): its RESET, with the notice,
				// comes with the next pull.
				had := p.tb.last
				if _, err := p.count(); err != nil && errors.Is(err, errDeltas) {
					p.fail(err)
					return
				}
				announced := len(p.tb.notices) > seen
				seen = len(p.tb.notices)
				if err := cut(got-1, announced, had == 0); err != nil {
					p.fail(fmt.Errorf("note %q: %w", text, err))
					return
				}
			}
			p.model = append(p.model, text)
			p.acked.Add(1)
			// Pull now and then, as a page does; and at once while the tab
			// has no delta yet: a page reopened after 0 is a new page to
			// the worker, which could not say it was lost.
			if n%16 == 15 || p.tb.last == 0 {
				if _, err := p.count(); err != nil {
					if errors.Is(err, errDeltas) {
						p.fail(err)
						return
					}
					p.retried.Add(1)
					if !resync() {
						return
					}
				}
			}
			continue
		}
		// Refused, gone or cut: retry after finding the page again. (A
		// retryable refusal did not run the note; a cut connection may
		// have: resync tells by the page's count.)
		p.retried.Add(1)
		if err == nil && !ans.Retry && !strings.Contains(ans.Error, "not open") && ans.Code != "maintenance" {
			p.failed.Add(1)
			p.fail(fmt.Errorf("note %q refused for good: %+v", text, ans))
			return
		}
		time.Sleep(50 * time.Millisecond)
		if !resync() {
			return
		}
	}
}

// check compares the page with its reference model, note by note; its
// deltas were checked on every pull (in order, without gap or duplicate,
// a reset delta excepted, which carries the whole tree).
func (p *chaosPerson) check(c *chaosCluster) error {
	if err := p.connect(c); err != nil {
		return err
	}
	n, err := p.count()
	if err != nil {
		return err
	}
	if n == len(p.model)+1 && p.pending != "" {
		p.model = append(p.model, p.pending) // in flight when typing stopped
	}
	if n != len(p.model) {
		return fmt.Errorf("the page holds %d notes, the model %d", n, len(p.model))
	}
	for i, want := range p.model {
		if got := p.tb.tree["note/"+strconv.Itoa(i)]; got != want {
			return fmt.Errorf("note %d = %v, the model says %q", i, got, want)
		}
	}
	return nil
}

// chaosNet is a network namespace joined to the host by a veth pair: a
// server inside is cut off from the others (and from the people) by
// taking its side of the link down.
type chaosNet struct {
	ns, hostDev, nsDev string
	hostIP, nsIP       string
}

// newChaosNet makes the namespace, or returns nil where it cannot be made
// (not root, no iproute2, no namespaces in this container).
func newChaosNet(t *testing.T) *chaosNet {
	if os.Geteuid() != 0 {
		return nil
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil
	}
	id := os.Getpid() % 200
	n := &chaosNet{ns: fmt.Sprintf("stickyd-chaos-%d", id), hostDev: fmt.Sprintf("sdch%d", id), nsDev: fmt.Sprintf("sdcn%d", id),
		hostIP: fmt.Sprintf("10.77.%d.1", id), nsIP: fmt.Sprintf("10.77.%d.2", id)}
	ip := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	// Left over from a run that was killed: start clean.
	_ = ip("link", "del", n.hostDev)
	_ = ip("netns", "del", n.ns)
	steps := [][]string{
		{"netns", "add", n.ns},
		{"link", "add", n.hostDev, "type", "veth", "peer", "name", n.nsDev},
		{"link", "set", n.nsDev, "netns", n.ns},
		{"addr", "add", n.hostIP + "/24", "dev", n.hostDev},
		{"link", "set", n.hostDev, "up"},
		{"netns", "exec", n.ns, "ip", "addr", "add", n.nsIP + "/24", "dev", n.nsDev},
		{"netns", "exec", n.ns, "ip", "link", "set", n.nsDev, "up"},
		{"netns", "exec", n.ns, "ip", "link", "set", "lo", "up"},
	}
	t.Cleanup(func() {
		_ = ip("link", "del", n.hostDev)
		_ = ip("netns", "del", n.ns)
	})
	for _, st := range steps {
		if err := ip(st...); err != nil {
			t.Logf("chaos: no network namespace: %v", err)
			return nil
		}
	}
	return n
}

// partition cuts the namespaced server off for 5 s, then joins it again.
func (c *chaosCluster) partition() error {
	set := func(state string) error {
		out, err := exec.Command("ip", "netns", "exec", c.net.ns, "ip", "link", "set", c.net.nsDev, state).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip link set %s: %v: %s", state, err, out)
		}
		return nil
	}
	i := len(c.ps) - 1
	c.setLive(i, false)
	if err := set("down"); err != nil {
		return err
	}
	time.Sleep(5 * time.Second)
	if err := set("up"); err != nil {
		return err
	}
	c.ps[i].waitHealthy()
	c.setLive(i, true)
	return nil
}
