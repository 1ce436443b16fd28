// Command monitor measures what the admin API's people lists and the
// monitor's reading cost at scale (issue 26, acceptance 5): it fills the
// project's own FSM with -people people (default 1,000,000) through Apply,
// one ConnectRequest each, on 1,000 workers of 100 agents in 4 groups, a
// tenth of them parked; then it serves the real admin API handler on a
// loopback port and times, -runs times each, the first page of:
//
//   - GET /v1/users (the default page, a page of 1,000, filtered by worker,
//     group and state),
//
//   - GET /v1/tally,
//
//   - GET /v1/monitor (the tally and the first page, composed as the agent
//     composes it, less the other agents' usage, which each agent reads
//     from its own memory for that page's people only),
//
//   - `stickyd user list` (the command, in process, against the same API).
//
//     go run ./test/bench/monitor                 # 1,000,000 people
//     go run ./test/bench/monitor -quick          # 100,000 people, 5 runs
//
// It prints the machine, the fill's cost and a Markdown table on stdout. It
// fails with a non-zero exit if any call fails or answers a page other
// than the one asked for; it never asserts a timing.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/command"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/supervisor"
)

const token = "bench-token"

func main() {
	people := flag.Int("people", 1_000_000, "people in the maps")
	runs := flag.Int("runs", 20, "calls timed per row")
	quick := flag.Bool("quick", false, "100,000 people, 5 runs")
	flag.Parse()
	if *quick {
		*people, *runs = 100_000, 5
	}
	if err := run(*people, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "monitor bench:", err)
		os.Exit(1)
	}
}

const (
	agents          = 100
	workersPerAgent = 10
)

func workerName(i int) string { return fmt.Sprintf("w%04d", i%(agents*workersPerAgent)) }

var groups = []string{"web", "api", "batch", "admin"}

// fill applies, as raft would, the agents' registrations and one connect
// per person; every tenth person is then parked by a move to the same
// worker.
func fill(f *fsm.FSM, people int) error {
	idx := uint64(0)
	apply := func(typ fsm.MessageType, body any) error {
		b, err := fsm.Encode(typ, body)
		if err != nil {
			return err
		}
		idx++
		if err, ok := f.Apply(&raft.Log{Index: idx, Data: b}).(error); ok {
			return fmt.Errorf("applying %T: %w", body, err)
		}
		return nil
	}
	for a := range agents {
		ws := map[string]string{}
		for i := range workersPerAgent {
			n := a*workersPerAgent + i
			ws[workerName(n)] = groups[n%len(groups)]
		}
		if err := apply(fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: fmt.Sprintf("agent-%03d", a), Workers: ws}); err != nil {
			return err
		}
	}
	for i := range people {
		u, w := fmt.Sprintf("user-%07d", i), workerName(i)
		if err := apply(fsm.ConnectRequestType, fsm.ConnectRequest{Conn: "c-" + u, User: u, Worker: w}); err != nil {
			return err
		}
		if i%10 == 0 {
			if err := apply(fsm.MoveBeginRequestType, fsm.MoveBeginRequest{User: u, From: w, To: w, Epoch: 1}); err != nil {
				return err
			}
			if err := apply(fsm.MoveCommitRequestType, fsm.MoveCommitRequest{User: u, To: w, Epoch: 2, Package: "pkg-" + u}); err != nil {
				return err
			}
		}
	}
	return nil
}

// maps is the API's supervisor over the maps alone: it reads, it moves
// nobody.
type maps struct{ *fsm.FSM }

func (maps) Move(context.Context, string, string, string) (move.Result, error) {
	return move.Result{}, fmt.Errorf("the bench moves nobody")
}

func (maps) MoveToGroup(context.Context, string, string, string) (move.Result, error) {
	return move.Result{}, fmt.Errorf("the bench moves nobody")
}

func (maps) Drain(context.Context, string, int, func(move.Result, error)) (supervisor.DrainResult, error) {
	return supervisor.DrainResult{}, fmt.Errorf("the bench moves nobody")
}

func (maps) ForgetUser(context.Context, string) (move.Forgotten, error) {
	return move.Forgotten{}, fmt.Errorf("the bench moves nobody")
}

func run(people, runs int) error {
	fmt.Printf("# monitor and people lists at %d people\n\n", people)
	fmt.Printf("%s/%s, %d CPUs, %s, %s\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02"))
	f := fsm.New()
	start := time.Now()
	if err := fill(f, people); err != nil {
		return err
	}
	took := time.Since(start)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("filled through Apply in %s (%.0f entries/s); heap %.0f MiB (%.0f B per person)\n\n",
		took.Round(time.Millisecond), float64(people*11/10+agents)/took.Seconds(), float64(ms.HeapAlloc)/(1<<20), float64(ms.HeapAlloc)/float64(people))

	groupOf := map[string]string{}
	for _, a := range f.Agents() {
		for w, g := range a.Workers {
			groupOf[w] = g
		}
	}
	h := api.Handler(api.Config{Token: token, Supervisor: maps{f},
		// As the agent's monitorPage composes it (without the workers'
		// probe readings and the other agents' usage of the page).
		Monitor: func(ctx context.Context, q fsm.UserQuery) (any, error) {
			page := f.UsersPage(q)
			v := monitor.View{At: time.Now(), Tally: f.Tally(), Next: monitor.EncodeCursor(page.Next)}
			v.People = monitor.PeopleOf(page.Users, func(w string) string { return groupOf[w] }, nil)
			return v, nil
		}})
	srv := httptest.NewServer(h)
	defer srv.Close()

	type row struct {
		name  string
		call  func() error
		times []time.Duration
	}
	get := func(path string, want int, check func([]byte) error) func() error {
		return func() error {
			req, _ := http.NewRequest("GET", srv.URL+path, nil)
			req.Header.Set("X-Stickyd-Token", token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != 200 {
				return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
			}
			return check(b)
		}
	}
	page := func(path string, want int) func() error {
		return get(path, want, func(b []byte) error {
			var p monitor.Page
			if err := json.Unmarshal(b, &p); err != nil {
				return err
			}
			if len(p.Users) != want {
				return fmt.Errorf("GET %s: %d people, want a full page of %d", path, len(p.Users), want)
			}
			return nil
		})
	}
	rows := []row{
		{name: "GET /v1/users (first page, 100)", call: page("/v1/users", 100)},
		{name: "GET /v1/users?limit=1000", call: page("/v1/users?limit=1000", 1000)},
		{name: "GET /v1/users?worker=w0007", call: page("/v1/users?worker=w0007", 100)},
		{name: "GET /v1/users?group=batch", call: page("/v1/users?group=batch", 100)},
		{name: "GET /v1/users?state=parked", call: page("/v1/users?state=parked", 100)},
		{name: "GET /v1/tally", call: get("/v1/tally", 0, func(b []byte) error {
			var t fsm.UserTally
			if err := json.Unmarshal(b, &t); err != nil {
				return err
			}
			if t.Users != people {
				return fmt.Errorf("the tally counts %d people, want %d", t.Users, people)
			}
			return nil
		})},
		{name: "GET /v1/monitor (tally + first page)", call: get("/v1/monitor", 0, func(b []byte) error {
			var v monitor.View
			if err := json.Unmarshal(b, &v); err != nil {
				return err
			}
			if v.Tally.Users != people || len(v.People) != monitor.DefaultLimit {
				return fmt.Errorf("the reading has %d people of %d, want %d of %d", len(v.People), v.Tally.Users, monitor.DefaultLimit, people)
			}
			return nil
		})},
		{name: "stickyd user list (first page)", call: func() error {
			ui := cli.NewMockUi()
			if code := command.RunWith([]string{"user", "list", "-address", srv.URL, "-token", token}, ui, nil); code != 0 {
				return fmt.Errorf("user list: exit %d: %s", code, ui.ErrorWriter.String())
			}
			if n := strings.Count(ui.OutputWriter.String(), "\n"); n != 1+monitor.DefaultLimit {
				return fmt.Errorf("user list printed %d lines, want a header and %d people", n, monitor.DefaultLimit)
			}
			return nil
		}},
	}
	for i := range rows {
		if err := rows[i].call(); err != nil { // warm-up: connections, first allocations
			return err
		}
		for range runs {
			t := time.Now()
			if err := rows[i].call(); err != nil {
				return err
			}
			rows[i].times = append(rows[i].times, time.Since(t))
		}
	}
	fmt.Printf("| call | runs | p50 | p90 | max |\n|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		slices.Sort(r.times)
		q := func(p float64) string {
			return fmt.Sprintf("%.1f ms", float64(r.times[min(len(r.times)-1, int(p*float64(len(r.times))))])/float64(time.Millisecond))
		}
		fmt.Printf("| %s | %d | %s | %s | %s |\n", r.name, len(r.times), q(0.5), q(0.9), q(1))
	}
	return nil
}
