package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// Keys of the idle part's servers, as the CSV file names them.
const (
	idleStickyd = "stickyd"
	idleEcho    = "go-echo"
	idleNginx   = "nginx"
)

const (
	// perSource is how many connections come from one loopback source
	// address: below the kernel's range of ephemeral ports (28,232 by
	// default), of which each connection from one address to one
	// destination takes one.
	perSource = 20000
	// fileHeadroom is the open files a process needs besides its
	// connections.
	fileHeadroom = 256
	// tabQuiet is the wait, besides -settle, before the idle tabs' reading.
	tabQuiet = 5 * time.Second
)

// memSample is what a server holds at one moment.
type memSample struct {
	rss        int64 // the server's own processes (nginx: master and workers)
	backend    int64 // the processes behind it: stickyd's workers, nginx's echo servers; 0 for the echo server
	heap       int64 // Go heap in use; 0 for nginx
	stacks     int64 // Go goroutine stacks; 0 for nginx
	goroutines int
}

// idleResult is one server holding conns idle WebSockets.
type idleResult struct {
	key, label string
	conns      int
	backend    string // what stands behind the server ("" for none)
	// skipped says why the cell was not measured; "" if it was.
	skipped string
	// base: before any browser; loaded: after conns page loads (stickyd
	// then knows conns connections); open: with conns WebSockets open;
	// tabs (stickyd): each WebSocket with a page open and a pull waiting.
	base, loaded, open, tabs memSample
	isGo                     bool
	hasTabs                  bool
}

// perTab is what one idle tab adds to an idle WebSocket: a page open and a
// pull waiting for its next change, in bytes, of the server's resident
// memory and of what is behind it.
func (r idleResult) perTab() (rss, backend float64) {
	n := float64(r.conns)
	return float64(r.tabs.rss-r.open.rss) / n, float64(r.tabs.backend-r.open.backend) / n
}

// perSocket is what one open WebSocket adds, in bytes: of the server's
// resident memory, of what is behind it.
func (r idleResult) perSocket() (rss, backend float64) {
	n := float64(r.conns)
	return float64(r.open.rss-r.loaded.rss) / n, float64(r.open.backend-r.loaded.backend) / n
}

// perSocketGo is what one open WebSocket adds to a Go server's heap in
// use and to its goroutine stacks, in bytes, and its goroutines.
func (r idleResult) perSocketGo() (heap, stacks, goroutines float64) {
	n := float64(r.conns)
	return float64(r.open.heap-r.loaded.heap) / n, float64(r.open.stacks-r.loaded.stacks) / n, float64(r.open.goroutines-r.loaded.goroutines) / n
}

// perBrowser is what one browser adds, page load and WebSocket together,
// of the server's resident memory.
func (r idleResult) perBrowser() float64 {
	return float64(r.open.rss-r.base.rss) / float64(r.conns)
}

// idleTarget is a server started for one idle cell.
type idleTarget struct {
	addr   string
	sample func(ctx context.Context) (memSample, error)
	stop   func() error
	exited func() string
}

// idleServer is a kind of server the idle part measures.
type idleServer struct {
	key, label, backend string
	isGo                bool
	// tabs says the server speaks the page protocol: an idle tab (a page
	// open, a pull waiting) is measured on top of each idle WebSocket.
	tabs bool
	// files is how many open files the server's busiest process needs
	// for conns connections.
	files func(conns int) int
	start func(ctx context.Context, dir string) (*idleTarget, error)
}

// measureIdle opens each count of idle WebSockets on a fresh stickyd
// agent, a fresh Go echo server and a fresh nginx (with fresh echo servers
// behind it) and reads their memory before and after.
func measureIdle(ctx context.Context, e *runEnv) ([]idleResult, error) {
	o := e.o
	servers := []idleServer{
		{
			key: idleStickyd, label: "stickyd front (agent process)", isGo: true, tabs: true,
			backend: fmt.Sprintf("%d workers", o.workers),
			files:   func(n int) int { return n },
			start: func(ctx context.Context, _ string) (*idleTarget, error) {
				p, err := startStickyd(ctx, o.workers, o.logLevel, "", e.stderr)
				if err != nil {
					return nil, err
				}
				return goTarget(p, func() ([]int, error) { return childrenOf(p.pid()), nil }), nil
			},
		},
		{
			key: idleEcho, label: "Go echo server (gorilla)", isGo: true,
			files: func(n int) int { return n },
			start: func(ctx context.Context, _ string) (*idleTarget, error) {
				p, err := startGoServer(ctx, roleEcho, nil, e.stderr)
				if err != nil {
					return nil, err
				}
				return goTarget(p, nil), nil
			},
		},
	}
	if _, err := findBinary("nginx", "nginx"); err == nil {
		servers = append(servers, idleServer{
			key: idleNginx, label: "nginx (master and workers)",
			backend: fmt.Sprintf("%d Go echo servers", o.workers),
			// Two descriptors per proxied WebSocket, spread over one
			// worker process per CPU (worker_processes auto).
			files: func(n int) int { return 2 * n / runtime.NumCPU() },
			start: func(ctx context.Context, dir string) (*idleTarget, error) {
				return startNginxTarget(ctx, dir, o.workers, e)
			},
		})
	} else {
		fmt.Fprintf(e.stderr, "idle: nginx left out: %v\n", err)
	}

	var rs []idleResult
	limit := fileLimit()
	for _, n := range o.idle {
		for _, s := range servers {
			if err := ctx.Err(); err != nil {
				return rs, fmt.Errorf("interrupted: %w", err)
			}
			r := idleResult{key: s.key, label: s.label, conns: n, backend: s.backend, isGo: s.isGo, hasTabs: s.tabs}
			if need := max(s.files(n), n) + fileHeadroom; need > limit {
				r.skipped = fmt.Sprintf("needs about %d open files in one process, over this machine's limit of %d "+
					"(the hard RLIMIT_NOFILE; raising it takes CAP_SYS_RESOURCE, or a higher limit given to the benchmark's shell)", need, limit)
				fmt.Fprintf(e.stderr, "  idle, %d WebSockets: %s: not measured: %s\n", n, s.label, r.skipped)
				rs = append(rs, r)
				continue
			}
			fmt.Fprintf(e.stderr, "  idle, %d WebSockets: %s ... ", n, s.label)
			dir := filepath.Join(e.tmp, fmt.Sprintf("idle-%s-%d", s.key, n))
			if err := runIdleCell(ctx, s, dir, o.settle, &r); err != nil {
				fmt.Fprintln(e.stderr, "error")
				return rs, fmt.Errorf("%s, %d WebSockets: %w", s.label, n, err)
			}
			rss, _ := r.perSocket()
			fmt.Fprintf(e.stderr, "%s per WebSocket\n", formatBytes(rss))
			rs = append(rs, r)
		}
	}
	return rs, nil
}

// goTarget is a Go server of this binary as an idle target; backends, if
// not nil, lists the processes behind it.
func goTarget(p *serverProc, backends func() ([]int, error)) *idleTarget {
	return &idleTarget{
		addr: p.addr,
		stop: p.stop,
		sample: func(ctx context.Context) (memSample, error) {
			var s memSample
			st, err := p.goStats(ctx)
			if err != nil {
				return s, err
			}
			s.heap, s.stacks, s.goroutines = int64(st.HeapInuse), int64(st.StackInuse), st.Goroutines
			if s.rss, err = rssOf(p.pid()); err != nil {
				return s, err
			}
			if backends != nil {
				pids, err := backends()
				if err != nil {
					return s, err
				}
				// The workers collect their garbage first (SIGUSR1,
				// benchkit.CollectOnSignal), as the server just did.
				for _, pid := range pids {
					_ = syscall.Kill(pid, syscall.SIGUSR1)
				}
				select {
				case <-ctx.Done():
					return s, ctx.Err()
				case <-time.After(time.Second):
				}
				if s.backend, err = rssOfAll(pids); err != nil {
					return s, err
				}
			}
			return s, nil
		},
		exited: p.exited,
	}
}

// startNginxTarget starts workers Go echo servers and nginx in front of
// them, as an idle target.
func startNginxTarget(ctx context.Context, dir string, workers int, e *runEnv) (t *idleTarget, err error) {
	var echoes []*serverProc
	var ngx *serverProc
	stopAll := func() error { // nginx first, then what is behind it
		procs := echoes
		if ngx != nil {
			procs = append([]*serverProc{ngx}, echoes...)
		}
		var first error
		for _, p := range procs {
			if err := p.stop(); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	defer func() {
		if err != nil {
			_ = stopAll()
		}
	}()
	var addrs []string
	for range workers {
		p, err := startGoServer(ctx, roleEcho, nil, e.stderr)
		if err != nil {
			return nil, err
		}
		echoes = append(echoes, p)
		addrs = append(addrs, p.addr)
	}
	if ngx, err = startNginx(ctx, dir, addrs, e.stderr); err != nil {
		return nil, err
	}
	return &idleTarget{
		addr: ngx.addr,
		stop: stopAll,
		sample: func(ctx context.Context) (memSample, error) {
			var s memSample
			var err error
			if s.rss, err = rssOfAll(append([]int{ngx.pid()}, childrenOf(ngx.pid())...)); err != nil {
				return s, err
			}
			for _, p := range echoes {
				if _, err := p.goStats(ctx); err != nil { // collects their garbage first
					return s, err
				}
				n, err := rssOf(p.pid())
				if err != nil {
					return s, err
				}
				s.backend += n
			}
			return s, nil
		},
		exited: ngx.exited,
	}, nil
}

// runIdleCell starts the server, reads its memory (each reading after
// settle, for the goroutines a connection starts and the buffers they
// allocate to be there), loads the site r.conns
// times (each a new browser), reads it again, opens a WebSocket for each
// browser and leaves them idle, reads it a last time, and closes
// everything. Every WebSocket must still be open at the last reading.
func runIdleCell(ctx context.Context, s idleServer, dir string, settle time.Duration, r *idleResult) (err error) {
	t, err := s.start(ctx, dir)
	if err != nil {
		return err
	}
	defer func() {
		if serr := t.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	defer func() {
		if err != nil {
			if note := t.exited(); note != "" {
				err = fmt.Errorf("%w (%s)", err, note)
			}
		}
	}()
	read := func() (memSample, error) {
		select {
		case <-time.After(settle):
		case <-ctx.Done():
			return memSample{}, ctx.Err()
		}
		return t.sample(ctx)
	}
	if r.base, err = read(); err != nil {
		return err
	}

	n := r.conns
	hc := newSiteClient()
	defer hc.CloseIdleConnections()
	cookies := make([]string, n)
	err = benchkit.ForEach(n, 64, func(i int) error {
		c, err := loadSite(ctx, hc, t.addr)
		cookies[i] = c
		return err
	})
	if err != nil {
		return fmt.Errorf("loading the site: %w", err)
	}
	hc.CloseIdleConnections()
	if r.loaded, err = read(); err != nil {
		return err
	}

	idle := newIdleSockets(n)
	defer idle.closeAll()
	err = benchkit.ForEach(n, 64, func(i int) error {
		ws, err := dialWS(ctx, t.addr, cookies[i], sourceAddr(i))
		if err != nil {
			return fmt.Errorf("WebSocket %d: %w", i, err)
		}
		idle.hold(i, ws)
		return nil
	})
	if err != nil {
		return err
	}
	if r.open, err = read(); err != nil {
		return err
	}
	if lost := idle.lost.Load(); lost > 0 {
		return fmt.Errorf("%d of %d idle WebSockets were closed before the memory was read", lost, n)
	}
	if !s.tabs {
		return nil
	}
	// Each socket opens a page and pulls its next change, as an open tab
	// does; a pull answered at the end of its wait is sent again, so one
	// waits at every moment.
	err = benchkit.ForEach(n, 64, func(i int) error { return idle.openTab(i) })
	if err != nil {
		return err
	}
	if err := idle.waitOpened(ctx, n); err != nil {
		return err
	}
	// A worker's mailbox runners outlive the burst that started them by
	// 5 s (plugins/worker's runnerIdle): the tabs are read once they are
	// gone, as an idle tab is.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(tabQuiet):
	}
	if r.tabs, err = read(); err != nil {
		return err
	}
	if lost := idle.lost.Load(); lost > 0 {
		return fmt.Errorf("%d of %d idle tabs were closed before the memory was read", lost, n)
	}
	return nil
}

// sourceAddr is the loopback address connection i comes from: the
// kernel's pick for the first perSource, then 127.0.0.2, 127.0.0.3, ...
// (every 127/8 address is the loopback interface's).
func sourceAddr(i int) net.Addr {
	if i < perSource {
		return nil
	}
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i/perSource))}
}

// idleSockets holds open WebSockets that send nothing. Each has a reader,
// which answers the server's pings as a browser does and counts the
// socket as lost if it ends before closeAll.
type idleSockets struct {
	socks   []*websocket.Conn
	wg      sync.WaitGroup
	closing atomic.Bool
	lost    atomic.Int64
	// opened counts the tabs whose page open was answered.
	opened atomic.Int64
}

// The ops of an idle tab: its page open, then pulls that wait.
var (
	tabOpen = []byte(`{"op":"open","id":1,"page":"tab","kind":"counter"}`)
	tabPull = []byte(`{"op":"pull","id":2,"page":"tab","after":1,"wait":25000}`)
)

// openTab opens socket i's page and its first waiting pull; the socket's
// reader sends the next pull when one is answered.
func (s *idleSockets) openTab(i int) error {
	ws := s.socks[i]
	if err := ws.WriteMessage(websocket.TextMessage, tabOpen); err != nil {
		return fmt.Errorf("tab %d: %w", i, err)
	}
	if err := ws.WriteMessage(websocket.TextMessage, tabPull); err != nil {
		return fmt.Errorf("tab %d: %w", i, err)
	}
	return nil
}

// waitOpened waits until n tabs' pages are open.
func (s *idleSockets) waitOpened(ctx context.Context, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for s.opened.Load() < int64(n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d tabs' pages opened in 2 minutes", s.opened.Load(), n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func newIdleSockets(n int) *idleSockets { return &idleSockets{socks: make([]*websocket.Conn, n)} }

// hold keeps ws as socket i and starts its reader.
func (s *idleSockets) hold(i int, ws *websocket.Conn) {
	s.socks[i] = ws
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			_, msg, err := ws.ReadMessage()
			if err != nil {
				if !s.closing.Load() {
					s.lost.Add(1)
				}
				return
			}
			var a struct {
				Op string `json:"op"`
				ID uint64 `json:"id"`
			}
			if json.Unmarshal(msg, &a) != nil {
				continue
			}
			switch {
			case a.ID == 1 && a.Op == "reply":
				s.opened.Add(1)
			case a.ID == 2:
				// Only this reader writes once the tab is open.
				_ = ws.WriteMessage(websocket.TextMessage, tabPull)
			}
		}
	}()
}

// closeAll closes every socket and waits for the readers.
func (s *idleSockets) closeAll() {
	s.closing.Store(true)
	for _, ws := range s.socks {
		if ws != nil {
			_ = ws.Close()
		}
	}
	s.wg.Wait()
}
