package command

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/cli"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/supervisor"
)

func TestWorkerList(t *testing.T) {
	born := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	workers := []host.WorkerInfo{
		{ID: "web-1", Group: "web", State: host.StateReady, Pid: 4242, Incarnation: 1, Born: born, App: "demo", AppVersion: "1.2.0",
			Cordoned: true, LastProbe: born, Users: 7, HeapBytes: 3 << 20},
		{ID: "web-2", Group: "web", State: host.StateDead, Incarnation: 3, Born: born, DiedAt: born.Add(time.Hour), HowDied: "killed for silence: 3 probes unanswered"},
		{ID: "api-1", Group: "zz", State: host.StateStarting},
	}
	tally := fsm.UserTally{Users: 7, Workers: map[string]int{"web-1": 7}}
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/workers": answer(200, workers), "GET /v1/tally": answer(200, tally)})
	r := run(t, f.args("worker", "list")...)
	r.expect(t, 0, nil, nil)
	if calls := f.Calls(); len(calls) != 2 || calls[0].Path != "/v1/workers" || calls[1].Path != "/v1/tally" {
		t.Fatalf("calls %+v, want the workers then the tally", calls)
	}
	stamp := born.Local().Format(time.RFC3339)
	want := [][]string{
		{"ID", "GROUP", "STATE", "PID", "INCARNATION", "BORN", "USERS", "HELD", "HEAP"},
		{"web-1", "web", "ready,cordoned", "4242", "1", stamp, "7", "7", "3.0MiB"},
		{"web-2", "web", "dead", "-", "3", stamp, "0", "-", "-"},
		{"api-1", "zz", "starting", "-", "0", "-", "0", "-", "-"},
	}
	table, ends, _ := strings.Cut(r.stdout, "\nLast ends:\n")
	if want := "web-2 at " + born.Add(time.Hour).Local().Format(time.RFC3339) + ": killed for silence: 3 probes unanswered"; strings.TrimSpace(ends) != want {
		t.Fatalf("last ends %q, want %q", ends, want)
	}
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != len(want) {
		t.Fatalf("want %d lines:\n%s", len(want), r.stdout)
	}
	for i, l := range lines {
		if got := strings.Fields(l); !reflect.DeepEqual(got, want[i]) {
			t.Errorf("row %d = %q, want %q", i, got, want[i])
		}
	}

	r = run(t, f.args("worker", "list", "-json")...)
	r.expect(t, 0, []string{`"how_died": "killed for silence: 3 probes unanswered"`, `"app_version": "1.2.0"`}, nil)
	var got []host.WorkerInfo
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 3 || !got[1].DiedAt.Equal(born.Add(time.Hour)) {
		t.Fatalf("-json: %v %+v", err, got)
	}

	empty := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/workers": answer(200, []host.WorkerInfo{})})
	run(t, empty.args("worker", "list")...).expect(t, 0, []string{"No workers"}, nil)
}

// drainLines is a drain as the agent streams it: each move, then the sum.
func drainLines(moves []api.DrainProgress, done supervisor.DrainResult, doneErr string) []api.DrainProgress {
	return append(moves, api.DrainProgress{Done: &done, Error: doneErr})
}

func moved(user, to string, bytes int, d time.Duration) api.DrainProgress {
	return api.DrainProgress{Move: &move.Result{User: user, From: "web-1", To: to, Outcome: move.Moved, Bytes: bytes, Duration: d}}
}

func failed(user, to, err string) api.DrainProgress {
	return api.DrainProgress{Move: &move.Result{User: user, From: "web-1", To: to, Outcome: move.RolledBack}, Error: err}
}

// streamLines answers a drain with lines, flushing after each.
func streamLines(lines []api.DrainProgress) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		for _, l := range lines {
			_ = enc.Encode(l)
			w.(http.Flusher).Flush()
		}
	}
}

func TestWorkerDrain(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		query  string
		lines  []api.DrainProgress
		code   int
		stdout []string
		stderr []string
	}{
		{
			name:  "all moved",
			args:  []string{"web-1", "-parallel", "3"},
			query: "parallel=3",
			lines: drainLines([]api.DrainProgress{
				moved("alice", "web-2", 12*1024, 3*time.Millisecond),
				moved("bob", "web-3", 700, 850*time.Microsecond),
				moved("carol", "web-2", 3<<20+300<<10, 1250*time.Millisecond),
			}, supervisor.DrainResult{Worker: "web-1", Users: 3, Moved: 3}, ""),
			code: 0,
			stdout: []string{
				"moved alice web-1 → web-2 (12 KiB, 3 ms)\n",
				"moved bob web-1 → web-3 (700 B, 850 µs)\n",
				"moved carol web-1 → web-2 (3.3 MiB, 1.25 s)\n",
				"drained web-1: 3 of 3 users moved, 0 failed",
			},
		},
		{
			name:  "one failed",
			args:  []string{"web-1"},
			query: "parallel=8",
			lines: drainLines([]api.DrainProgress{
				moved("alice", "web-2", 1024, time.Millisecond),
				failed("bob", "web-3", "move rolled back: the person stays home"),
			}, supervisor.DrainResult{Worker: "web-1", Users: 2, Moved: 1, Failed: 1}, ""),
			code:   1,
			stdout: []string{"moved alice web-1 → web-2 (1 KiB, 1 ms)", "failed bob web-1 → web-3: move rolled back: the person stays home"},
			stderr: []string{"drained web-1: 1 of 2 users moved, 1 failed"},
		},
		{
			name:   "nobody home",
			args:   []string{"web-1"},
			query:  "parallel=8",
			lines:  drainLines(nil, supervisor.DrainResult{Worker: "web-1"}, ""),
			code:   0,
			stdout: []string{"drained web-1: 0 of 0 users moved, 0 failed"},
		},
		{
			name:  "stopped",
			args:  []string{"web-1"},
			query: "parallel=8",
			lines: drainLines([]api.DrainProgress{moved("alice", "web-2", 10, time.Millisecond)},
				supervisor.DrainResult{Worker: "web-1", Users: 5, Moved: 1}, "context canceled"),
			code:   1,
			stdout: []string{"moved alice"},
			stderr: []string{"draining web-1 stopped: context canceled; 1 of 5 users moved, 0 failed"},
		},
		{
			name:   "cut short",
			args:   []string{"web-1"},
			query:  "parallel=8",
			lines:  []api.DrainProgress{moved("alice", "web-2", 10, time.Millisecond)},
			code:   1,
			stdout: []string{"moved alice"},
			stderr: []string{"draining web-1: the agent ended the stream before the drain finished (1 moved and 0 failed so far)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, map[string]http.HandlerFunc{"POST /v1/workers/{worker}/drain": streamLines(tt.lines)})
			r := run(t, f.args(append([]string{"worker", "drain"}, tt.args...)...)...)
			r.expect(t, tt.code, tt.stdout, tt.stderr)
			c := f.only(t)
			if c.Method != "POST" || c.Path != "/v1/workers/web-1/drain" || c.Query != tt.query {
				t.Fatalf("called %s %s?%s", c.Method, c.Path, c.Query)
			}
		})
	}
}

func TestWorkerDrainErrors(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/workers/{worker}/drain": func(w http.ResponseWriter, r *http.Request) {
			writeError(w, 404, `draining "web-9": no such worker`)
		},
	})
	r := run(t, f.args("worker", "drain", "web-9")...)
	r.expect(t, 1, nil, nil)
	if got, want := strings.TrimSpace(r.stderr), `draining "web-9": no such worker`; got != want {
		t.Fatalf("stderr %q, want %q: the context said once", got, want)
	}

	garbled := newFakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/workers/{worker}/drain": func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("{\"move\": oops\n")) },
	})
	run(t, garbled.args("worker", "drain", "web-1")...).expect(t, 1, nil, []string{"draining web-1: reading progress (0 moved and 0 failed so far)"})

	for _, p := range []string{"0", "257", "x"} {
		run(t, f.args("worker", "drain", "web-1", "-parallel", p)...).expect(t, 1, nil, []string{"-parallel"})
	}
	run(t, f.args("worker", "drain")...).expect(t, 1, nil, []string{"missing arguments", "Usage: stickyd worker drain"})
	if n := len(f.Calls()); n != 1 {
		t.Fatalf("the API saw %d calls, want 1 (usage errors call nothing)", n)
	}
}

// chanUI is a MockUi that also hands each output line to a channel, so a
// test can see what the command printed while it still runs.
type chanUI struct {
	*cli.MockUi
	lines chan string
}

func (u *chanUI) Output(s string) {
	u.MockUi.Output(s)
	u.lines <- s
}

// TestWorkerDrainStreams checks that a move is printed as soon as the
// agent reports it, not when the drain ends: the fake holds the rest of
// the drain back until the first line has been printed.
func TestWorkerDrainStreams(t *testing.T) {
	release := make(chan struct{})
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/workers/{worker}/drain": func(w http.ResponseWriter, r *http.Request) {
			enc := json.NewEncoder(w)
			_ = enc.Encode(moved("alice", "web-2", 100, time.Millisecond))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			_ = enc.Encode(moved("bob", "web-2", 100, time.Millisecond))
			done := supervisor.DrainResult{Worker: "web-1", Users: 2, Moved: 2}
			_ = enc.Encode(api.DrainProgress{Done: &done})
		},
	})
	// Let the handler finish even when the test fails early: the server's
	// Close waits for it. (Cleanups run last-in first-out: this one runs
	// before the server's.)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	t.Setenv("STICKYD_TOKEN", "")
	ui := &chanUI{MockUi: cli.NewMockUi(), lines: make(chan string, 16)}
	code := make(chan int, 1)
	go func() { code <- RunWith(f.args("worker", "drain", "web-1"), ui, nil) }()

	select {
	case l := <-ui.lines:
		if !strings.HasPrefix(l, "moved alice web-1 → web-2") {
			t.Fatalf("first line %q", l)
		}
	case c := <-code:
		t.Fatalf("drain ended (exit %d) before the first move was printed; stderr %q", c, ui.ErrorWriter.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the first move was not printed while the drain ran")
	}
	unblock()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d; stderr %q", c, ui.ErrorWriter.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the drain did not end")
	}
	if out := ui.OutputWriter.String(); !strings.Contains(out, "moved bob") || !strings.Contains(out, "drained web-1: 2 of 2 users moved, 0 failed") {
		t.Fatalf("output:\n%s", out)
	}
}
