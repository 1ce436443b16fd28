package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// The Python rows: a python3 group whose app imports Django and loads
// 100,000 rows (pyapp/benchapp.py), its workers started as the host starts
// them, from launch to their hello and to their first answer:
//
//   - cold: each worker imports the app and builds on its own
//     (benchcold:application, host.PluginLauncher);
//   - template fork: the group's template imported and built once
//     (unmeasured here, its time reported), each worker forked from it
//     (host.TemplateLauncher): one at a time (250 ms apart, the template's
//     spare fork ready), and back to back (each start waits for the spare
//     the last one left).
//
// With pyWorkers forks running, each one's private memory (USS: its
// Private_Clean + Private_Dirty in /proc/PID/smaps_rollup) and
// proportional share (PSS) are read beside the template's resident size.

// pyWorkers is how many forks are kept running for the memory reading.
const pyWorkers = 4

// spareGap spaces the starts of the "one at a time" row.
const spareGap = 250 * time.Millisecond

// pySample is one Python worker's start.
type pySample struct {
	ready, answer time.Duration
	pid           int
}

// pyResults are the Python rows.
type pyResults struct {
	cold, fork  []pySample
	burst       []pySample    // forks started back to back
	build       time.Duration // the first start: the template built, then forked
	templateRSS int64
	uss, pss    []int64 // of the forks kept running
	coldUSS     int64   // of one cold worker, for reference
	python      string
}

func measurePython(ctx context.Context, runs int, tmp string, stderr io.Writer) (*pyResults, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}
	if out, err := runPython("-c", "import django, grpc, google.protobuf"); err != nil {
		return nil, fmt.Errorf("/usr/bin/python3 cannot import django, grpc and protobuf (make deps installs them): %v %s", err, out)
	}
	r := &pyResults{}
	r.python, _ = runPython("--version")
	env := []string{
		"PYTHONPATH=" + filepath.Join(root, "plugins", "python") + string(filepath.ListSeparator) + filepath.Join(root, "test", "bench", "template", "pyapp"),
		"PYTHONDONTWRITEBYTECODE=1",
	}
	log := hclog.NewNullLogger()
	cold := &host.PluginLauncher{Command: "/usr/bin/python3", Args: []string{"-m", "stickyd.worker", "benchcold:application"}, Env: env, Logger: log}
	for run := range runs {
		fmt.Fprintf(stderr, "  python cold, start %d of %d ... ", run+1, runs)
		s, proc, err := pyStart(ctx, cold, fmt.Sprintf("cold-%d", run+1))
		if err == nil && run == 0 {
			_, r.coldUSS, err = privateMemory(s.pid)
		}
		if proc != nil {
			proc.Kill()
		}
		if err != nil {
			fmt.Fprintln(stderr, "error")
			return nil, fmt.Errorf("python cold start %d: %w", run+1, err)
		}
		fmt.Fprintf(stderr, "ready in %s\n", benchkit.FormatDuration(s.ready))
		r.cold = append(r.cold, s)
	}

	tl := &host.TemplateLauncher{Command: "/usr/bin/python3", Dir: filepath.Join(tmp, "py"),
		Args: []string{"-m", "stickyd.template", "--build", "benchapp:build", "benchapp:application"}, Env: env, Logger: log}
	defer tl.Close()
	fmt.Fprintln(stderr, "  python template: building it and forking the first worker (timed once)")
	s, proc, err := pyStart(ctx, tl, "fork-0")
	if err != nil {
		return nil, fmt.Errorf("the template's first fork: %w", err)
	}
	proc.Kill()
	r.build = s.answer
	var running []host.Process
	defer func() {
		for _, p := range running {
			p.Kill()
		}
	}()
	// One at a time, as a pool replaces or adds a worker: the template's
	// spare is ready (made within about 50 ms of the last start). Back to
	// back, as a group starts its workers together: each start waits for
	// the spare the last one left.
	for i, way := range []struct {
		name string
		gap  time.Duration
		into *[]pySample
	}{{"one at a time", spareGap, &r.fork}, {"back to back", 0, &r.burst}} {
		n := runs
		if i == 0 {
			n = max(runs, pyWorkers)
		}
		for run := range n {
			fmt.Fprintf(stderr, "  python template fork, %s, start %d of %d ... ", way.name, run+1, n)
			time.Sleep(way.gap)
			s, proc, err := pyStart(ctx, tl, fmt.Sprintf("fork-%d-%d", i, run+1))
			if err != nil {
				fmt.Fprintln(stderr, "error")
				if proc != nil {
					proc.Kill()
				}
				return nil, fmt.Errorf("python fork %d (%s): %w", run+1, way.name, err)
			}
			fmt.Fprintf(stderr, "ready in %s\n", benchkit.FormatDuration(s.ready))
			*way.into = append(*way.into, s)
			if len(running) < pyWorkers {
				running = append(running, proc)
			} else {
				proc.Kill()
			}
		}
	}
	info := tl.Info()
	if info.Builds != 1 {
		return nil, fmt.Errorf("the template was built %d times, want once", info.Builds)
	}
	if r.templateRSS, _, err = residentMemory(info.Pid); err != nil {
		return nil, err
	}
	for _, p := range running {
		pss, uss, err := privateMemory(p.Pid())
		if err != nil {
			return nil, err
		}
		r.pss, r.uss = append(r.pss, pss), append(r.uss, uss)
	}
	return r, nil
}

// pyStart starts one Python worker with l and times it to its hello and to
// its answer to a first request, which must say 100,000 rows.
func pyStart(ctx context.Context, l host.Launcher, id string) (pySample, host.Process, error) {
	var s pySample
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	start := time.Now()
	proc, conn, err := l.Launch(ctx, id)
	if err != nil {
		return s, nil, err
	}
	s.pid = proc.Pid()
	if _, err := channel.Accept(ctx, conn, &protocol.HelloAck{WorkerId: id, Group: "bench"}); err != nil {
		return s, proc, err
	}
	s.ready = time.Since(start)
	peer := channel.NewPeer(conn, nil)
	r, err := frame(ctx, peer, &protocol.Frame{Kind: &protocol.Frame_Http{Http: &protocol.HTTPRequest{Method: "GET", Url: "/"}}})
	if err != nil {
		return s, proc, fmt.Errorf("first request: %w", err)
	}
	var ans struct{ Rows int }
	if json.Unmarshal(r.GetHttp().GetBody(), &ans) != nil || ans.Rows != 100_000 {
		return s, proc, fmt.Errorf("the first request answered %q", r.GetHttp().GetBody())
	}
	s.answer = time.Since(start)
	return s, proc, nil
}

// privateMemory reads a process's proportional set size and its unique
// (private) set size from /proc/PID/smaps_rollup.
func privateMemory(pid int) (pss, uss int64, err error) {
	kb, err := procKB(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("reading a worker's memory: %w", err)
	}
	return kb["Pss"], kb["Private_Clean"] + kb["Private_Dirty"], nil
}

func runPython(args ...string) (string, error) {
	out, err := execCommand("/usr/bin/python3", args...)
	return strings.TrimSpace(out), err
}

func printPython(w io.Writer, r *pyResults) {
	if r == nil {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Python: template by fork vs cold")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- %s; the app imports Django and loads 100,000 rows (test/bench/template/pyapp); the group's first start (the template imported and built once, then the first fork) answered in %s\n",
		r.python, benchkit.FormatDuration(r.build))
	fmt.Fprintln(w, "- ready: launch → the worker's hello; answer: launch → its answer to a first request (the rows counted)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| start | starts | ready p50 | ready max | answer p50 | answer max |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|")
	for _, row := range []struct {
		name string
		ss   []pySample
	}{{"cold (each worker builds)", r.cold}, {"template fork, one at a time", r.fork}, {"template fork, back to back", r.burst}} {
		ready := make([]time.Duration, len(row.ss))
		answer := make([]time.Duration, len(row.ss))
		for i, s := range row.ss {
			ready[i], answer[i] = s.ready, s.answer
		}
		sortDurations(ready)
		sortDurations(answer)
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s |\n", row.name, len(row.ss),
			benchkit.FormatDuration(benchkit.Percentile(ready, 0.5)), benchkit.FormatDuration(benchkit.Percentile(ready, 1)),
			benchkit.FormatDuration(benchkit.Percentile(answer, 0.5)), benchkit.FormatDuration(benchkit.Percentile(answer, 1)))
	}
	fmt.Fprintln(w)
	maxUSS, maxPSS := int64(0), int64(0)
	for i := range r.uss {
		maxUSS, maxPSS = max(maxUSS, r.uss[i]), max(maxPSS, r.pss[i])
	}
	fmt.Fprintf(w, "Memory, with %d forks running: the template's resident size %s; each fork's private memory (USS) at most %s (%.0f %% of the template's), its PSS at most %s; a cold worker's USS %s.\n",
		len(r.uss), mb(r.templateRSS), mb(maxUSS), 100*float64(maxUSS)/float64(r.templateRSS), mb(maxPSS), mb(r.coldUSS))
}
