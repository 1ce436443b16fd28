package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// TestMain lets the test binary be what the benchmark re-executes: the
// servers under test and stickyd's workers.
func TestMain(m *testing.M) {
	if benchkit.ServeWorkerIfAsked() {
		return
	}
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(serveRole(role, os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSmokeRun runs every part at a tiny size, each part whose peer is not
// installed left out (the idle part needs none: nginx is then left out of
// it), and checks that the report has a row with messages for every cell,
// CPU time, frames and allocations for every live cell, the processes' CPU
// for every proxy cell, memory for every idle server, and the files. It
// checks no timing.
func TestSmokeRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	parts := []string{partIdle}
	for _, p := range []struct{ part, bin string }{{partRedis, "redis-server"}, {partLive, "redis-server"}, {partNginx, "nginx"}} {
		if _, err := findBinary(p.bin, p.bin); err != nil {
			t.Logf("the %s part is left out: %v", p.part, err)
			continue
		}
		parts = append(parts, p.part)
	}
	// A race-detector build sleeps a second at exit; the servers this test
	// starts are such builds, and each stop would wait for it.
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	out := t.TempDir()
	var stderr bytes.Buffer
	o, err := parseFlags([]string{"-quick", "-parts", strings.Join(parts, ","),
		"-sizes", "1KB", "-pages", "2", "-codecs", "json", "-duration", "200ms", "-warmup", "50ms",
		"-conns", "3", "-idle", "20", "-settle", "50ms", "-workers", "1", "-out", out, "-log", "off"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	r, err := measure(context.Background(), o, &stderr)
	if err != nil {
		t.Fatalf("measuring: %v\nprogress:\n%s", err, stderr.String())
	}

	if o.runs(partRedis) {
		checkRows(t, "state", len(r.state), 1+len(o.codecs)+1)
		for _, s := range r.state {
			if s.msgs == 0 || s.rate() <= 0 {
				t.Errorf("state %s: %d msgs, %.0f msgs/s", s.key, s.msgs, s.rate())
			}
		}
	}
	if o.runs(partLive) {
		// Each system at each size, and each with one tab.
		checkRows(t, "live", len(r.live), 2*(1+len(o.codecs)+1))
		for i := range r.live {
			checkLiveCell(t, &r.live[i])
		}
	}
	if o.runs(partNginx) {
		checkRows(t, "proxy", len(r.proxy), 3)
		for _, p := range r.proxy {
			if p.msgs == 0 || p.rate() <= 0 {
				t.Errorf("proxy %s: %d msgs, %.0f msgs/s", p.key, p.msgs, p.rate())
			}
			// The servers' counters and the client's were read.
			var servers, clients int
			for _, c := range p.costs {
				if c.stand == standClient {
					clients++
				} else {
					servers++
				}
			}
			if servers == 0 || clients != 1 || sumCosts(p.costs, "").cpu <= 0 {
				t.Errorf("proxy %s: costs of %d server processes and %d clients, %v CPU in all", p.key, servers, clients, sumCosts(p.costs, "").cpu)
			}
		}
	}
	if len(r.idle) < 2 {
		t.Errorf("idle: %d rows, want stickyd's and the echo server's at least", len(r.idle))
	}
	for _, s := range r.idle {
		if s.skipped != "" || s.open.rss <= 0 || s.open.rss <= s.base.rss {
			t.Errorf("idle %s: skipped %q, RSS %d before, %d with WebSockets", s.key, s.skipped, s.base.rss, s.open.rss)
		}
	}

	var report bytes.Buffer
	printReport(&report, o, r)
	for _, want := range []string{"- machine: ", "| stickyd front (agent process) | 20 |", "| Go echo server (gorilla) | 20 |"} {
		if !strings.Contains(report.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, report.String())
		}
	}
	if len(r.files) != 2*len(parts) {
		t.Errorf("wrote %v, want a CSV and a PNG per part", r.files)
	}
	for _, f := range r.files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(f) {
		case ".csv":
			if lines := strings.Count(string(b), "\n"); lines < 2 {
				t.Errorf("%s: %d lines, want a header and rows", f, lines)
			}
		case ".png":
			if !bytes.HasPrefix(b, []byte("\x89PNG")) {
				t.Errorf("%s is not a PNG", f)
			}
		}
	}
}

// checkLiveCell checks that a live cell made round trips and has the
// costs of its servers: CPU time, frames both ways, and allocations in
// every Go process in front.
func checkLiveCell(t *testing.T, r *liveResult) {
	t.Helper()
	name := fmt.Sprintf("live %s, %d tabs", r.key, r.tabs)
	if r.msgs == 0 || r.rate() <= 0 || r.total < r.msgs {
		t.Errorf("%s: %d msgs of %d round trips, %.0f msgs/s", name, r.msgs, r.total, r.rate())
	}
	if len(r.costs) == 0 || sumCosts(r.costs, "").cpu <= 0 {
		t.Errorf("%s: no CPU time read: %+v", name, r.costs)
	}
	for _, c := range r.costs {
		if c.isGo && c.stand == standFront && c.allocs == 0 {
			t.Errorf("%s: %s allocated nothing", name, c.name)
		}
	}
	if r.framesOut < r.total || r.framesIn < r.total {
		t.Errorf("%s: %d frames out, %d in for %d round trips", name, r.framesOut, r.framesIn, r.total)
	}
	if r.key == sysStickyd && len(r.perWorker) == 0 {
		t.Errorf("%s: no tab's worker noted", name)
	}
}

// TestGridAsCounter checks that the peers' grid and edit write what the
// counter app writes, delta for delta: the peers do the same work.
func TestGridAsCounter(t *testing.T) {
	ctx := context.Background()
	page := worker.NewTestPage("counter")
	app := counter.New()
	st := &pageState{}
	var want, got []string
	send := func(msg string) {
		t.Helper()
		if _, err := app.Message(ctx, page, json.RawMessage(msg)); err != nil {
			t.Fatalf("counter: %s: %v", msg, err)
		}
		_, changes, err := apply(st, json.RawMessage(msg), "test")
		if err != nil {
			t.Fatalf("peers: %s: %v", msg, err)
		}
		ds, err := st.number(changes)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			got = append(got, d.Op+" "+d.Path+" "+string(d.Value))
		}
	}
	send(`{"op":"grid","bytes":2000}`)
	for range 450 { // past the draft's restart, and round the rows twice
		send(`{"op":"edit"}`)
	}
	for _, d := range page.TestDeltas() {
		want = append(want, d.Op+" "+d.Path+" "+d.Value)
	}
	if len(got) != len(want) {
		t.Fatalf("%d deltas, the counter app wrote %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delta %d: %.120s, the counter app wrote %.120s", i, got[i], want[i])
		}
	}
}

func checkRows(t *testing.T, part string, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %d rows, want %d", part, got, want)
	}
}

// TestManySourceAddresses checks that a connection past the first
// perSource comes from another loopback address and works: the idle part
// needs that for more connections than one address has ports.
func TestManySourceAddresses(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := httptest.NewServer(echoServer{})
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	hc := newSiteClient()
	defer hc.CloseIdleConnections()
	ctx := context.Background()
	cookie, err := loadSite(ctx, hc, addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, perSource, 2*perSource + 1} {
		ws, err := dialWS(ctx, addr, cookie, sourceAddr(i))
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		want := fmt.Sprintf("127.0.0.%d", 1+i/perSource)
		if got := ws.LocalAddr().(*net.TCPAddr).IP.String(); got != want {
			t.Errorf("connection %d comes from %s, want %s", i, got, want)
		}
		if err := ws.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		if _, msg, err := ws.ReadMessage(); err != nil || string(msg) != "hello" {
			t.Errorf("connection %d: echo %q, %v", i, msg, err)
		}
		ws.Close()
	}
}
