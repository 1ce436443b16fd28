// Command lifecycle measures the life of sessions under churn: whether the
// maps, the maps' raft snapshot and the workers' memory stay flat while
// people keep arriving and leaving, and how fast idle people are parked,
// woken and forgotten.
//
// An agent runs in this process with its data on disk in a temporary
// directory, the counter app on -workers subprocess workers (this binary
// re-executed), and short lifecycle settings: -idle-park (2s) and
// -forget-after (10s), so that a run of minutes goes through the lives a
// real day takes hours for (the settings' ratio to the run is what scales;
// the code paths are the production ones). Throughout -duration:
//
//   - -stayers people stay connected and type an inc every second;
//   - visitors arrive at -visitors per second: each loads the site, opens a
//     counter page on a WebSocket, types 3 incs and leaves (the tab closed);
//     -return of them come back after twice -idle-park, once their person
//     has been parked, with an inc that must continue their count (a wake),
//     then leave for good;
//   - crawlers send -crawl requests per second without a cookie: a page view
//     (which makes a person nobody sees again) and three asset requests.
//
// Every -sample it reads the people and connections in the maps, the size
// of a raft snapshot (GET /v1/operator/snapshot), the workers' live heap
// and RSS (their probes), and the idle parks, wakes and forgettings since
// the last sample. It prints a Markdown table per sample and the drift of
// the last third of the run against its second third, on stdout.
//
//	go run ./test/bench/lifecycle              # 5 minutes
//	go run ./test/bench/lifecycle -quick       # 60 s
//	go run ./test/bench/lifecycle -duration 30m
//
// A failed request of a stayer or a visitor fails the run (an error is
// never a result). It must stay a program that prints a table, never a
// timed assertion.
package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

var program = benchkit.Program[*options, *report]{
	Name:    "lifecycle",
	Parse:   parseFlags,
	Measure: measure,
	Report:  printReport,
}

func main() { program.Main() }

type options struct {
	duration, sample time.Duration
	idlePark, forget time.Duration
	stayers, workers int
	visitors, crawl  float64
	returning        float64
	logLevel         hclog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := benchkit.NewFlags("lifecycle", "smoke run: -duration 60s -sample 10s unless given", stderr)
	duration := fs.Duration("duration", 5*time.Minute, "how long the churn runs")
	sample := fs.Duration("sample", 20*time.Second, "how often the maps, the snapshot and the workers are read")
	idle := fs.Duration("idle-park", 2*time.Second, "the agent's lifecycle.idle_park")
	forget := fs.Duration("forget-after", 10*time.Second, "the agent's lifecycle.forget_after")
	stayers := fs.Int("stayers", 20, "people connected the whole run, typing an inc a second")
	visitors := fs.Float64("visitors", 20, "visitors arriving per second, each typing 3 incs and leaving")
	returning := fs.Float64("return", 0.3, "the share of visitors who come back once parked (a wake), then leave")
	crawl := fs.Float64("crawl", 100, "cookieless requests per second (a page view and three assets in four)")
	workers := fs.Int("workers", 2, "subprocess workers of the agent's group")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o := &options{duration: *duration, sample: *sample, idlePark: *idle, forget: *forget, stayers: *stayers,
		workers: *workers, visitors: *visitors, crawl: *crawl, returning: *returning}
	if fs.QuickDefault("duration") {
		o.duration = time.Minute
	}
	if fs.QuickDefault("sample") {
		o.sample = 10 * time.Second
	}
	switch {
	case o.duration < 3*o.sample:
		return nil, errors.New("-duration must be at least three -sample intervals")
	case o.sample < time.Second:
		return nil, errors.New("-sample must be at least 1s")
	case o.idlePark < time.Second || o.forget < time.Second:
		return nil, errors.New("-idle-park and -forget-after must be at least 1s (the agent's own bounds)")
	case o.stayers < 1 || o.workers < 1:
		return nil, errors.New("-stayers and -workers must be at least 1")
	case o.visitors < 0 || o.crawl < 0 || o.returning < 0 || o.returning > 1:
		return nil, errors.New("-visitors and -crawl must not be negative, -return must be 0..1")
	}
	var err error
	if o.logLevel, err = fs.LogLevel(); err != nil {
		return nil, err
	}
	return o, nil
}

// report is what a run measured.
type report struct {
	samples []sample
	// churn counts what the clients did.
	visitors, returned, crawled int64
}

// sample is one reading of the agent.
type sample struct {
	at                time.Duration // since the churn began
	people, conns     int
	snapshot          int
	heap, rss         uint64 // the workers', summed
	parked, forgotten float64
	woken             int64
	interval          time.Duration
}

func printReport(w io.Writer, o *options, r *report) {
	fmt.Fprintf(w, "# stickyd lifecycle: the maps, the snapshot and the workers under churn\n\n")
	fmt.Fprintf(w, "- machine: %s\n", benchkit.Machine())
	fmt.Fprintf(w, "- agent: %d subprocess workers, data on disk; lifecycle idle_park %v, forget_after %v\n", o.workers, o.idlePark, o.forget)
	fmt.Fprintf(w, "- churn for %v: %d stayers typing an inc a second; %.0f visitors/s (3 incs, then gone; %.0f %% come back once parked); %.0f cookieless requests/s (a page view in four)\n",
		o.duration, o.stayers, o.visitors, 100*o.returning, o.crawl)
	fmt.Fprintf(w, "- done: %d visitors, %d of them back once (woken), %d cookieless requests\n\n", r.visitors, r.returned, r.crawled)
	fmt.Fprintln(w, "| at | people in the maps | connections | snapshot | workers' live heap | workers' RSS | idle parks/s | wakes/s | forgotten/s |")
	fmt.Fprintln(w, "|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, s := range r.samples {
		secs := s.interval.Seconds()
		fmt.Fprintf(w, "| %v | %d | %d | %s | %s | %s | %.1f | %.1f | %.1f |\n", s.at.Round(time.Second), s.people, s.conns,
			bytes(uint64(s.snapshot)), bytes(s.heap), bytes(s.rss), s.parked/secs, float64(s.woken)/secs, s.forgotten/secs)
	}
	n := len(r.samples)
	if n >= 3 {
		mid, last := r.samples[n/3:2*n/3], r.samples[2*n/3:]
		mean := func(ss []sample, f func(sample) float64) float64 {
			t := 0.0
			for _, s := range ss {
				t += f(s)
			}
			return t / float64(len(ss))
		}
		drift := func(f func(sample) float64) string {
			a, b := mean(mid, f), mean(last, f)
			if a == 0 {
				return "–"
			}
			return fmt.Sprintf("%+.1f %%", 100*(b-a)/a)
		}
		fmt.Fprintf(w, "\nDrift, the last third of the samples against the second: people %s, snapshot %s, live heap %s, RSS %s.\n",
			drift(func(s sample) float64 { return float64(s.people) }), drift(func(s sample) float64 { return float64(s.snapshot) }),
			drift(func(s sample) float64 { return float64(s.heap) }), drift(func(s sample) float64 { return float64(s.rss) }))
	}
}

func bytes(n uint64) string {
	switch {
	case n >= 10<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
