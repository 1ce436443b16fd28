package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

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
// memory for every idle server, and the files. It checks no timing.
func TestSmokeRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	parts := []string{partIdle}
	for _, p := range []struct{ part, bin string }{{partRedis, "redis-server"}, {partNginx, "nginx"}} {
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
	if o.runs(partNginx) {
		checkRows(t, "proxy", len(r.proxy), 3)
		for _, p := range r.proxy {
			if p.msgs == 0 || p.rate() <= 0 {
				t.Errorf("proxy %s: %d msgs, %.0f msgs/s", p.key, p.msgs, p.rate())
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
