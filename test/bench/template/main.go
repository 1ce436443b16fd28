// Command template measures what a group's template saves a worker's start:
// the demo worker (plugins/examples/demo/cmd/demo-worker), whose engine
// takes over a second to build, started as the host starts it (go-plugin
// subprocess, host.PluginLauncher, then the channel's handshake), from
// process launch to its hello and to its first sort of the grid, in each
// way it can get its engine:
//
//   - no engine: -engine=false, the demo without one (the table is made on
//     the first grid page and every query sorts), for reference;
//   - cold: no template directory, the worker builds its engine;
//   - first: an empty template directory, the worker builds the engine and
//     saves it as the group's image;
//   - template: the image is there, the worker maps it;
//   - 2 at once: two workers start together on an empty directory, one
//     builds and the other waits for it and maps the image.
//
// Run it from the module's root:
//
//	go run ./test/bench/template            # 5 starts per way, ~1 min on 2 cores
//	go run ./test/bench/template -quick     # 2 starts per way
//
// It prints the machine and a Markdown table on stdout, progress on stderr.
// Every start must get its engine the way its row says (read from the
// worker's "engine ready" log line) and answer its first sort, or the run
// fails: an error is never a result. It asserts no timing.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

var program = benchkit.Program[*options, *results]{
	Name:    "template",
	Parse:   parseFlags,
	Measure: measure,
	Report:  printReport,
}

func main() { program.Main() }

// options are the parsed flags.
type options struct {
	runs     int
	worker   string // a built demo-worker; "" builds one
	dir      string // where the temporary directories are made
	python   bool   // measure the Python rows too
	logLevel hclog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := benchkit.NewFlags("template", "smoke run: -runs 2 unless given", stderr)
	runs := fs.Int("runs", 5, "measured starts per way")
	worker := fs.String("worker", "", "a built demo-worker binary to start (default: build one with go build)")
	dir := fs.String("dir", "", "where to make the temporary template directories (default: the OS's temporary directory)")
	python := fs.Bool("python", true, "also measure the Python rows (a python3 group's template by fork vs cold starts)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o := &options{runs: *runs, worker: *worker, dir: *dir, python: *python}
	if fs.QuickDefault("runs") {
		o.runs = 2
	}
	if o.runs < 1 {
		return nil, errors.New("-runs must be at least 1")
	}
	var err error
	if o.logLevel, err = fs.LogLevel(); err != nil {
		return nil, err
	}
	return o, nil
}

// way is one way a worker gets its engine, a row of the table.
type way struct {
	name    string
	args    []string // demo-worker's flags
	how     []string // the "engine ready" how of each worker, sorted; nil: no engine
	workers int      // started together
	// dir gives the run's template directory: "" for none.
	dir func(run int) (string, error)
}

// results are every way's starts, and what the report says under the table.
type results struct {
	ways       []way
	samples    [][]sample // by way, then start
	imageBytes int64
	load       string     // the machine's load averages before and after
	py         *pyResults // nil without -python
}

func measure(ctx context.Context, o *options, stderr io.Writer) (*results, error) {
	tmp, err := os.MkdirTemp(o.dir, "stickyd-template-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	exe := o.worker
	if exe == "" {
		fmt.Fprintln(stderr, "building the demo worker")
		if exe, err = buildWorker(ctx, tmp); err != nil {
			return nil, err
		}
	}
	fresh := func(run int) (string, error) { return os.MkdirTemp(tmp, "fresh-") }
	shared := filepath.Join(tmp, "shared")
	none := func(int) (string, error) { return "", nil }
	ways := []way{
		{name: "no engine", args: []string{"-engine=false"}, workers: 1, dir: none},
		{name: "cold", how: []string{"cold"}, workers: 1, dir: none},
		{name: "first", how: []string{"built"}, workers: 1, dir: fresh},
		{name: "template", how: []string{"mapped"}, workers: 1, dir: func(int) (string, error) { return shared, nil }},
		{name: "2 at once", how: []string{"built", "mapped"}, workers: 2, dir: fresh},
	}
	log := workerLogger(o.logLevel, stderr)
	// The template way needs its image: one unmeasured start makes it.
	fmt.Fprintln(stderr, "building the shared template (unmeasured)")
	if _, err := startWorkers(ctx, exe, nil, shared, 1, log); err != nil {
		return nil, fmt.Errorf("building the shared template: %w", err)
	}
	r := &results{ways: ways, samples: make([][]sample, len(ways)), load: loadAverage()}
	defer func() { r.load += " → " + loadAverage() }()
	if r.imageBytes, err = imageSize(shared); err != nil {
		return nil, err
	}
	for i, w := range ways {
		for run := range o.runs {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("interrupted: %w", err)
			}
			dir, err := w.dir(run)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(stderr, "  %s, start %d of %d ... ", w.name, run+1, o.runs)
			ss, err := startWorkers(ctx, exe, w.args, dir, w.workers, log)
			if err == nil {
				err = checkHow(w, ss)
			}
			if err != nil {
				fmt.Fprintln(stderr, "error")
				return nil, fmt.Errorf("%s, start %d: %w", w.name, run+1, err)
			}
			s := slowest(ss)
			fmt.Fprintf(stderr, "ready in %s, first sort in %s\n", benchkit.FormatDuration(s.ready), benchkit.FormatDuration(s.firstSort))
			r.samples[i] = append(r.samples[i], s)
		}
	}
	if o.python {
		if r.py, err = measurePython(ctx, o.runs, tmp, stderr); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// checkHow fails a start whose workers did not get their engine as w says.
func checkHow(w way, ss []sample) error {
	var got []string
	for _, s := range ss {
		if s.engine != nil {
			got = append(got, s.engine.How)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, w.how) {
		return fmt.Errorf("the workers got their engines as %q, want %q", got, w.how)
	}
	return nil
}

// slowest is the sample of the worker that was ready last: a start of
// several workers is over when all of them are.
func slowest(ss []sample) sample {
	return slices.MaxFunc(ss, func(a, b sample) int { return int(a.firstSort - b.firstSort) })
}

// imageSize is the size of the one image in dir.
func imageSize(dir string) (int64, error) {
	imgs, err := filepath.Glob(filepath.Join(dir, "*.img"))
	if err != nil || len(imgs) != 1 {
		return 0, fmt.Errorf("looking for the image in %s: found %q (%v)", dir, imgs, err)
	}
	fi, err := os.Stat(imgs[0])
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func printReport(w io.Writer, o *options, r *results) {
	fmt.Fprintln(w, "# stickyd worker start: group template vs cold")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- machine: %s; load average (1, 5, 15 min) %s\n", benchkit.Machine(), r.load)
	fmt.Fprintf(w, "- worker: the demo (600,000 orders) as a go-plugin subprocess; %d starts per row, one at a time; the engine image is %.1f MB\n",
		o.runs, float64(r.imageBytes)/(1<<20))
	fmt.Fprintln(w, "- ready: process launch → the worker's hello (its engine is loaded before it); first sort: launch → a grid page opened and sorted by name")
	fmt.Fprintln(w, "- RSS: the worker's resident memory after its first sort; file: the part of it that is file pages (the executable and a mapped image), shared with other processes")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| start | engine | ready p50 | ready max | first sort p50 | first sort max | RSS p50 | of which file |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|")
	for i, wy := range r.ways {
		ss := r.samples[i]
		ready := sorted(ss, func(s sample) time.Duration { return s.ready })
		first := sorted(ss, func(s sample) time.Duration { return s.firstSort })
		rss := sortedInts(ss, func(s sample) int64 { return s.rss })
		file := sortedInts(ss, func(s sample) int64 { return s.rssFile })
		how := "none"
		if wy.how != nil {
			how = fmt.Sprint(wy.how)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", wy.name, how,
			benchkit.FormatDuration(benchkit.Percentile(ready, 0.5)), benchkit.FormatDuration(benchkit.Percentile(ready, 1)),
			benchkit.FormatDuration(benchkit.Percentile(first, 0.5)), benchkit.FormatDuration(benchkit.Percentile(first, 1)),
			mb(rss[(len(rss)-1)/2]), mb(file[(len(file)-1)/2]))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Inside the worker (its \"engine ready\" log line, medians):")
	fmt.Fprintln(w)
	for i, wy := range r.ways {
		if wy.how == nil || wy.workers != 1 {
			continue
		}
		ss := r.samples[i]
		med := func(f func(*engineLine) time.Duration) string {
			return benchkit.FormatDuration(benchkit.Percentile(sorted(ss, func(s sample) time.Duration { return f(s.engine) }), 0.5))
		}
		fmt.Fprintf(w, "- %s: engine ready in %s (key %s, build %s, save %s, map %s, load %s)\n", wy.name,
			med(func(e *engineLine) time.Duration { return e.Took }), med(func(e *engineLine) time.Duration { return e.Key }),
			med(func(e *engineLine) time.Duration { return e.Build }), med(func(e *engineLine) time.Duration { return e.Save }),
			med(func(e *engineLine) time.Duration { return e.Map }), med(func(e *engineLine) time.Duration { return e.Load }))
	}
	printPython(w, r.py)
}

func sorted(ss []sample, f func(sample) time.Duration) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	slices.Sort(out)
	return out
}

func sortedInts(ss []sample, f func(sample) int64) []int64 {
	out := make([]int64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	slices.Sort(out)
	return out
}

// loadAverage is /proc/loadavg's three averages: a busy machine makes
// every start slower, the builds most.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }
