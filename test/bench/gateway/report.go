package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// cell is one system at one load in one round.
type cell struct {
	sys, load string
	round     int
	out       outcome
	cpu       cpuTimes // the system's processes' CPU time over the cell
	others    float64  // the CPUs other processes than the benchmark's kept busy, on average
	trips     float64  // a stickyd cluster's batches sent to its leader over the cell (-1: not read)
}

type report struct {
	o       *options
	machine string
	date    time.Time
	sys     []system
	cells   []cell
	portkey string            // Portkey's versions, when it ran
	usage   map[string]string // what each stickyd counted, by system
}

// The columns of latency: whole answers, streamed calls, all calls.
const (
	colWhole    = whole
	colStreamed = streamed
	colAll      = 2
)

// row is one system at one load: the median of its rounds.
type row struct {
	sys, load        string
	rate             float64 // calls answered per second
	p50, p99         [3]time.Duration
	added50, added99 [3]time.Duration
	hasAdded         bool
	calls, errors    int // over every round
	cpu              time.Duration
	hasCPU           bool
	firstErr         string
	trips            float64 // a stickyd cluster's trips to its leader per call answered (-1: none read)
}

func (r *report) rows() []row {
	var out []row
	for _, l := range r.o.loads() {
		for _, s := range r.sys {
			rw := row{sys: s.key, load: l.name, hasCPU: s.key != "direct", hasAdded: s.key != "direct"}
			var rates []float64
			var p50, p99, a50, a99 [3][]time.Duration
			var cpu []time.Duration
			var trips []float64
			for _, c := range r.cells {
				if c.sys != s.key || c.load != l.name {
					continue
				}
				rw.calls += c.out.ok + c.out.errors
				rw.errors += c.out.errors
				if rw.firstErr == "" {
					rw.firstErr = c.out.firstErr
				}
				if c.out.elapsed > 0 {
					rates = append(rates, float64(c.out.ok)/c.out.elapsed.Seconds())
				}
				if c.out.ok > 0 {
					cpu = append(cpu, c.cpu.total()/time.Duration(c.out.ok))
					if c.trips >= 0 {
						trips = append(trips, c.trips/float64(c.out.ok))
					}
				}
				d, hasDirect := r.cell("direct", l.name, c.round)
				for col := range 3 {
					kind := col
					if col == colAll {
						kind = -1
					}
					if col != colAll && len(c.out.lat[col]) == 0 {
						continue
					}
					p50[col] = append(p50[col], c.out.p(kind, 0.50))
					p99[col] = append(p99[col], c.out.p(kind, 0.99))
					if hasDirect && (col == colAll || len(d.out.lat[col]) > 0) {
						a50[col] = append(a50[col], c.out.p(kind, 0.50)-d.out.p(kind, 0.50))
						a99[col] = append(a99[col], c.out.p(kind, 0.99)-d.out.p(kind, 0.99))
					}
				}
			}
			rw.rate = medianFloat(rates)
			for col := range 3 {
				rw.p50[col], rw.p99[col] = median(p50[col]), median(p99[col])
				rw.added50[col], rw.added99[col] = median(a50[col]), median(a99[col])
			}
			rw.cpu = median(cpu)
			rw.trips = -1
			if len(trips) > 0 {
				rw.trips = medianFloat(trips)
			}
			out = append(out, rw)
		}
	}
	return out
}

// cell is system sys's cell at load in round.
func (r *report) cell(sys, load string, round int) (cell, bool) {
	for _, c := range r.cells {
		if c.sys == sys && c.load == load && c.round == round {
			return c, true
		}
	}
	return cell{}, false
}

func median(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func medianFloat(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// cpuPerCall is a cell's CPU time per call answered, for progress lines.
func cpuPerCall(c cell) string {
	if c.sys == "direct" || c.out.ok == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f µs (%.0f %% system)", float64(c.cpu.total()/time.Duration(c.out.ok))/float64(time.Microsecond),
		100*float64(c.cpu.sys)/float64(max(c.cpu.total(), 1)))
}

// signed writes an added latency, which may be below zero, as
// benchkit.FormatDuration writes a latency.
func signed(d time.Duration) string {
	if d < 0 {
		return "−" + benchkit.FormatDuration(-d)
	}
	return benchkit.FormatDuration(d)
}

func printReport(w io.Writer, o *options, r *report) {
	latency := "instant"
	if o.latency > 0 {
		latency = "answering after " + o.latency.String()
	}
	fmt.Fprintf(w, "AI gateways side by side (%s): one fake OpenAI-compatible provider (%s), one Go client, every system at every load in turn, %d round(s) of %s a cell, the median of the rounds\n",
		r.date.Format("2006-01-02 15:04 UTC"), latency, o.rounds, o.duration)
	fmt.Fprintf(w, "machine: %s (the load, the provider and the systems share it)\n", r.machine)
	fmt.Fprintf(w, "stickyd: %s\n", features(o.featuresOn))
	if r.portkey != "" {
		fmt.Fprintf(w, "Portkey: %s, one process, headless, the provider named per call (x-portkey-provider openai, x-portkey-custom-host)\n", r.portkey)
	}
	fmt.Fprintf(w, "calls: %.0f %% streamed (done at their [DONE]), the others whole answers; closed loop timed from each send, open loop from each call's scheduled time; "+
		"added: the system's figure less direct's at the same load in the same round; CPU per call: the user and system CPU time of the system's processes "+
		"(stickyd's servers summed) over the cell, divided by the calls answered\n", o.stream*100)

	var others []float64
	for _, c := range r.cells {
		others = append(others, c.others)
	}
	slices.Sort(others)
	if len(others) > 0 {
		fmt.Fprintf(w, "noise: processes outside the benchmark kept %.2f CPUs busy in the median cell, %.2f in the busiest (of %d)\n",
			medianFloat(others), others[len(others)-1], runtime.NumCPU())
	}
	fmt.Fprintln(w)

	rows := r.rows()
	fmt.Fprintln(w, "| system | load | calls/s | p50 | p99 | added p50 | added p99 | errors | CPU µs/call |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|")
	for _, x := range rows {
		a50, a99, cpu := "—", "—", "—"
		if x.hasAdded {
			a50, a99 = signed(x.added50[colAll]), signed(x.added99[colAll])
		}
		if x.hasCPU {
			cpu = fmt.Sprintf("%.0f", float64(x.cpu)/float64(time.Microsecond))
		}
		errs := "0"
		if x.errors > 0 {
			errs = fmt.Sprintf("%d (%.1f %%)", x.errors, 100*float64(x.errors)/float64(max(x.calls, 1)))
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %s | %s | %s |\n", nameOf(x.sys), x.load, x.rate,
			benchkit.FormatDuration(x.p50[colAll]), benchkit.FormatDuration(x.p99[colAll]), a50, a99, errs, cpu)
	}

	if o.stream > 0 && o.stream < 1 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "By kind of call:")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| system | load | whole p50 | whole p99 | whole added p50 / p99 | streamed p50 | streamed p99 | streamed added p50 / p99 |")
		fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|")
		for _, x := range rows {
			if x.sys == "queue" {
				continue
			}
			added := func(col int) string {
				if !x.hasAdded {
					return "—"
				}
				return signed(x.added50[col]) + " / " + signed(x.added99[col])
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", nameOf(x.sys), x.load,
				benchkit.FormatDuration(x.p50[colWhole]), benchkit.FormatDuration(x.p99[colWhole]), added(colWhole),
				benchkit.FormatDuration(x.p50[colStreamed]), benchkit.FormatDuration(x.p99[colStreamed]), added(colStreamed))
		}
	}

	r.printRatios(w, rows)

	var trips []string
	for _, x := range rows {
		if x.trips >= 0 {
			trips = append(trips, fmt.Sprintf("%.2f at %s", x.trips, x.load))
		}
	}
	if len(trips) > 0 {
		fmt.Fprintf(w, "\nstickyd, 3 servers: trips to the leader a call (stickyd_gateway_leader_trips_total, every server's, over the calls answered): %s\n", strings.Join(trips, ", "))
	}

	fmt.Fprintln(w)
	for _, x := range rows {
		if x.firstErr != "" {
			fmt.Fprintf(w, "first error of %s at %s: %s\n", nameOf(x.sys), x.load, x.firstErr)
		}
	}
	for _, s := range r.sys {
		if u := r.usage[s.key]; u != "" {
			fmt.Fprintln(w, u)
		}
	}
}

// printRatios writes stickyd's CPU per call and added p99 as shares of
// Portkey's, at each load.
func (r *report) printRatios(w io.Writer, rows []row) {
	find := func(sys, load string) (row, bool) {
		i := slices.IndexFunc(rows, func(x row) bool { return x.sys == sys && x.load == load })
		if i < 0 {
			return row{}, false
		}
		return rows[i], true
	}
	var mine []string
	for _, s := range r.sys {
		if s.key == "stickyd1" || s.key == "stickyd3" {
			mine = append(mine, s.key)
		}
	}
	if len(mine) == 0 || r.portkey == "" {
		return
	}
	ratio := func(a, b time.Duration) string {
		if b <= 0 || a < 0 {
			return "—"
		}
		return fmt.Sprintf("%.3f×", float64(a)/float64(b))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "stickyd as a share of Portkey (goal at 500/s, issue 46: CPU per call ≤ 0.1×, added p99 ≤ 0.05×):")
	fmt.Fprintln(w)
	head, rule := "| load |", "|---|"
	for _, k := range mine {
		head += fmt.Sprintf(" %s: CPU per call | %s: added p99 |", nameOf(k), nameOf(k))
		rule += "--:|--:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, l := range r.o.loads() {
		p, ok := find("portkey", l.name)
		if !ok {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "| %s |", l.name)
		for _, k := range mine {
			s, _ := find(k, l.name)
			fmt.Fprintf(&b, " %s | %s |", ratio(s.cpu, p.cpu), ratio(s.added99[colAll], p.added99[colAll]))
		}
		fmt.Fprintln(w, b.String())
	}
}
