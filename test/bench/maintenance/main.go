// Command maintenance measures what a maintenance window costs the requests
// that do not need the backend in maintenance: the latency of people typing
// (the counter app's "inc", which needs no backend) during a phase with no
// window and during a phase with a window on db-a while other people place
// orders (the "order" op, which needs db-a, and waits). Both phases run in
// the same process on the same agent, one after the other, after a
// baseline of the typists alone. While the window holds the orders, their
// senders are idle: the typists then share the machine with fewer people
// than with orders flowing.
//
//	go run ./test/bench/maintenance            # 8 typists, 8 orderers, 10 s phases
//	go run ./test/bench/maintenance -quick     # 3 s phases
//
// It prints the machine and a Markdown table on stdout, progress on
// stderr. A failed request fails the run: an error is never a result.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

var program = benchkit.Program[*options, *report]{
	Name:    "maintenance",
	Parse:   parseFlags,
	Measure: measure,
	Report:  printReport,
}

func main() { program.Main() }

type options struct {
	typists, orderers, workers int
	phase                      time.Duration
	mode                       string
	logLevel                   hclog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	f := benchkit.NewFlags("maintenance", "3 s phases", stderr)
	o := &options{}
	f.IntVar(&o.typists, "typists", 8, "people typing (inc: needs no backend)")
	f.IntVar(&o.orderers, "orderers", 8, "people placing orders (order: needs db-a)")
	f.IntVar(&o.workers, "workers", 2, "workers of the counter group")
	f.DurationVar(&o.phase, "phase", 10*time.Second, "length of each phase")
	f.StringVar(&o.mode, "mode", benchkit.ModeSubprocess, "workers: subprocess (go-plugin) or inprocess")
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	if f.QuickDefault("phase") {
		o.phase = 3 * time.Second
	}
	if o.typists < 1 || o.orderers < 0 || o.workers < 1 || o.phase < time.Second {
		return nil, fmt.Errorf("want -typists >= 1, -orderers >= 0, -workers >= 1 and -phase >= 1s")
	}
	var err error
	o.logLevel, err = f.LogLevel()
	return o, err
}

// phase is what one phase measured.
type phase struct {
	name          string
	typed         int
	p50, p99, max time.Duration
	orders        int // orders answered during the phase
	held          int // orders answered after the window (held through it)
}

type report struct {
	o      *options
	phases []phase
}

func measure(ctx context.Context, o *options, stderr io.Writer) (*report, error) {
	log := benchkit.NewAgentLogger(o.logLevel, stderr)
	g, err := benchkit.CounterGroup(o.mode, o.workers)
	if err != nil {
		return nil, err
	}
	cfg := benchkit.AgentConfig(log, g)
	cfg.Admin.Token = "bench-token"
	a, err := benchkit.StartAgent(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer benchkit.StopAgent(ctx, a)
	open := func(prefix string, n int) ([]*benchkit.Page, error) {
		var ps []*benchkit.Page
		for i := range n {
			p, err := benchkit.OpenPage(ctx, a.Addr(), fmt.Sprintf("%s-%d", prefix, i), time.Minute)
			if err != nil {
				return nil, err
			}
			ps = append(ps, p)
		}
		return ps, nil
	}
	typists, err := open("typist", o.typists)
	if err != nil {
		return nil, err
	}
	orderers, err := open("orderer", o.orderers)
	if err != nil {
		return nil, err
	}
	r := &report{o: o}
	for _, c := range []struct {
		name     string
		orderers []*benchkit.Page
		window   bool
	}{
		{"no window, typists alone", nil, false},
		{"no window, orders flowing", orderers, false},
		{"window on db-a, orders held", orderers, true},
	} {
		fmt.Fprintf(stderr, "maintenance: phase %q, %s\n", c.name, o.phase)
		ph, err := runPhase(ctx, a, typists, c.orderers, c.window, o.phase)
		if err != nil {
			return nil, fmt.Errorf("phase %q: %w", c.name, err)
		}
		ph.name = c.name
		r.phases = append(r.phases, ph)
	}
	return r, nil
}

// runPhase types and orders for d; with window, db-a is in maintenance for
// the whole phase and ends at its close, releasing the held orders.
func runPhase(ctx context.Context, a *agent.Agent, typists, orderers []*benchkit.Page, window bool, d time.Duration) (phase, error) {
	var ph phase
	if window {
		if err := admin(ctx, a, "PUT", "/v1/maintenance/db-a", `{"reason":"benchmark","max_wait":"5m"}`); err != nil {
			return ph, err
		}
	}
	end := time.Now().Add(d)
	var (
		mu      sync.Mutex
		lat     []time.Duration
		firstEr error
		wg      sync.WaitGroup
		ended   time.Time
		endOnce sync.Once
	)
	fail := func(err error) {
		mu.Lock()
		if firstEr == nil {
			firstEr = err
		}
		mu.Unlock()
	}
	for _, p := range typists {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				t0 := time.Now()
				if _, err := p.Send("inc"); err != nil {
					fail(err)
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	var ow sync.WaitGroup
	for _, p := range orderers {
		ow.Add(1)
		go func() {
			defer ow.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				if _, err := p.Send("order"); err != nil {
					fail(err)
					return
				}
				mu.Lock()
				if !ended.IsZero() {
					ph.held++
				} else {
					ph.orders++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if window {
		endOnce.Do(func() {
			mu.Lock()
			ended = time.Now()
			mu.Unlock()
		})
		if err := admin(ctx, a, "DELETE", "/v1/maintenance/db-a", ""); err != nil {
			return ph, err
		}
	}
	ow.Wait()
	if firstEr != nil {
		return ph, firstEr
	}
	slices.Sort(lat)
	ph.typed = len(lat)
	ph.p50, ph.p99, ph.max = benchkit.Percentile(lat, 0.50), benchkit.Percentile(lat, 0.99), lat[len(lat)-1]
	return ph, nil
}

func printReport(w io.Writer, o *options, r *report) {
	fmt.Fprintf(w, "maintenance window: %d typists (inc, no backend) and %d orderers (order, needs db-a), %s phases, %d %s workers\n",
		o.typists, o.orderers, o.phase, o.workers, o.mode)
	fmt.Fprintf(w, "machine: %s\n\n", benchkit.Machine())
	fmt.Fprintln(w, "| phase | typed | inc p50 | inc p99 | inc max | orders answered in phase | orders held, answered at the end |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, p := range r.phases {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %d | %d |\n", p.name, p.typed,
			benchkit.FormatDuration(p.p50), benchkit.FormatDuration(p.p99), benchkit.FormatDuration(p.max), p.orders, p.held)
	}
}

// admin calls the agent's admin API; anything but 200 is an error.
func admin(ctx context.Context, a *agent.Agent, method, path, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+a.AdminAddr()+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-Stickyd-Token", a.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	return nil
}
