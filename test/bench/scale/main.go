// Command scale measures the maps at population scale on the real code:
// the FSM (its snapshot, its restore, its heap per person) and three raft
// servers of the project's own raftnode over loopback TCP with their logs
// on disk, fed by a hundred simulated hosts whose people arrive, move by
// batches and leave, with a snapshot during the run and a member
// restarted and caught up. It prints a Markdown table; it asserts no
// timing.
//
//	go run ./test/bench/scale                  # 1,000,000 people, 2 connections each
//	go run ./test/bench/scale -quick           # 50,000 people
//	go run ./test/bench/scale -phases maps     # the maps alone, without raft
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

type options struct {
	people  int
	conns   int
	hosts   int
	workers int // per host
	writers int
	batch   int // people in one move entry
	moves   int
	phases  []string
	dir     string
	// the mirror phase
	consul       string
	mirrorPeople int
	mirrorRate   int
	mirrorFor    time.Duration
}

type results struct {
	maps   *mapsResult
	raft   *raftResult
	mirror *mirrorResult
}

func main() {
	benchkit.Program[options, results]{
		Name:    "scale",
		Parse:   parse,
		Measure: measure,
		Report:  report,
	}.Main()
}

func parse(args []string, stderr io.Writer) (options, error) {
	fs := benchkit.NewFlags("scale", "a smoke run: 50,000 people, 20,000 moves", stderr)
	o := options{}
	fs.IntVar(&o.people, "people", 1_000_000, "people in the maps")
	fs.IntVar(&o.conns, "conns", 2, "connections a person")
	fs.IntVar(&o.hosts, "hosts", 100, "simulated hosts")
	fs.IntVar(&o.workers, "workers", 10, "workers a host")
	fs.IntVar(&o.writers, "writers", 512, "concurrent writers to raft (fronts and hosts)")
	fs.IntVar(&o.batch, "batch", 64, "people in one move entry (the batched road)")
	fs.IntVar(&o.moves, "moves", 200_000, "people moved in the raft phase")
	phases := fs.String("phases", "maps,raft,mirror", "what to measure: maps (the FSM alone), raft (three servers on loopback), mirror (the Consul mirror's lag, a real Consul agent)")
	fs.StringVar(&o.consul, "consul", "", "the Consul agent binary of the mirror phase (default bin/consul, from make tools, else consul on the PATH)")
	fs.IntVar(&o.mirrorPeople, "mirror-people", 100_000, "people in the maps of the mirror phase")
	fs.IntVar(&o.mirrorRate, "mirror-rate", 1000, "registry changes a second in the mirror phase")
	fs.DurationVar(&o.mirrorFor, "mirror-for", 20*time.Second, "how long the mirror phase changes the registry")
	fs.StringVar(&o.dir, "dir", "", "where the servers keep their data (default a temporary folder, removed after)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.QuickDefault("people") {
		o.people = 50_000
	}
	if fs.QuickDefault("moves") {
		o.moves = 20_000
	}
	if fs.QuickDefault("mirror-people") {
		o.mirrorPeople = 10_000
	}
	if fs.QuickDefault("mirror-for") {
		o.mirrorFor = 5 * time.Second
	}
	o.phases = benchkit.SplitList(*phases)
	for _, p := range o.phases {
		if p != "maps" && p != "raft" && p != "mirror" {
			return o, fmt.Errorf("-phases: unknown phase %q (maps, raft, mirror)", p)
		}
	}
	switch {
	case o.people < 1 || o.conns < 1 || o.hosts < 1 || o.workers < 1 || o.writers < 1 || o.batch < 1 || o.moves < 0:
		return o, fmt.Errorf("-people, -conns, -hosts, -workers, -writers and -batch must be at least 1, -moves at least 0")
	case o.mirrorPeople < 1 || o.mirrorRate < 1 || o.mirrorFor <= 0:
		return o, fmt.Errorf("-mirror-people, -mirror-rate and -mirror-for must be positive")
	case o.moves > o.people:
		return o, fmt.Errorf("-moves %d is more than -people %d", o.moves, o.people)
	}
	return o, nil
}

func measure(ctx context.Context, o options, stderr io.Writer) (results, error) {
	var r results
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "stickyd-scale-")
		if err != nil {
			return r, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if slices.Contains(o.phases, "maps") {
		m, err := measureMaps(ctx, o, dir, stderr)
		if err != nil {
			return r, fmt.Errorf("maps: %w", err)
		}
		r.maps = &m
	}
	if slices.Contains(o.phases, "raft") {
		rr, err := measureRaft(ctx, o, dir, stderr)
		if err != nil {
			return r, fmt.Errorf("raft: %w", err)
		}
		r.raft = &rr
	}
	if slices.Contains(o.phases, "mirror") {
		bin, err := consulBinary(o.consul)
		if err != nil {
			return r, fmt.Errorf("mirror: %w", err)
		}
		o.consul = bin
		mr, err := measureMirror(ctx, o, dir, stderr)
		if err != nil {
			return r, fmt.Errorf("mirror: %w", err)
		}
		r.mirror = &mr
	}
	return r, nil
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func report(w io.Writer, o options, r results) {
	if r.maps != nil || r.raft != nil {
		fmt.Fprintf(w, "%d people, %d connections each, %d hosts × %d workers\n\n", o.people, o.conns, o.hosts, o.workers)
	}
	fmt.Fprintln(w, "| measure | value |")
	fmt.Fprintln(w, "|---|---|")
	row := func(k, v string) { fmt.Fprintf(w, "| %s | %s |\n", k, v) }
	if m := r.maps; m != nil {
		row("maps: filled (entries applied directly)", fmt.Sprintf("%v, %.0f entries/s", m.fill.Round(time.Millisecond), float64(m.conns)/m.fill.Seconds()))
		row("maps: heap a person, leader", fmt.Sprintf("%.0f B", m.heapLeader))
		row("maps: heap a person, follower (restored)", fmt.Sprintf("%.0f B", m.heapFollower))
		row("snapshot: the maps' lock held", ms(m.snapLock))
		row("snapshot: persisted (encoded, written)", fmt.Sprintf("%s, %.1f MB", ms(m.persist), float64(m.snapBytes)/1e6))
		row("snapshot: restored", ms(m.restore))
		row("snapshot: persist + restore", ms(m.persist+m.restore))
		row("longest apply while the snapshot was taken and written", fmt.Sprintf("%s (of %d)", ms(m.maxApply), m.applies))
		row("longest an apply waited for the maps' lock meanwhile", ms(m.maxWait))
		row("longest front lookup meanwhile", fmt.Sprintf("%s (of %d)", ms(m.maxLookup), m.lookups))
		row("walks of everyone meanwhile (people by worker, then stale connections)", fmt.Sprintf("%d", m.walks))
	}
	if rr := r.raft; rr != nil {
		rr.rows(row)
	}
	if mr := r.mirror; mr != nil {
		mr.rows(row)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, strings.TrimSpace(`Reproduce: go run ./test/bench/scale (make bench-scale).`))
}
