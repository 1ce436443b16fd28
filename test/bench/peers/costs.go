package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture Go runs on (the kernel converts to it).
const userHZ = 100

// Where a server process stands: in front (the process the browsers talk
// to: stickyd's agent, the Go app) or behind it (stickyd's workers,
// redis-server).
const (
	standFront  = "front"
	standBehind = "behind"
	standClient = "client" // the load generator, this program
)

// costProc is one server process whose costs a live cell reads.
type costProc struct {
	name  string // "agent", "worker web-1", "redis-server", "redis-app"
	stand string // standFront or standBehind
	pid   int
	// allocs reads the heap objects the process has allocated; nil for a
	// process that is not Go (redis-server).
	allocs func(ctx context.Context) (uint64, error)
}

// procCounters is what a process has done since it started.
type procCounters struct {
	cpu    time.Duration // user and system time, all its threads
	writes int64         // write syscalls (syscw)
	allocs uint64        // heap objects allocated; 0 when not Go
}

// procCost is what a process did over a span: the counters' differences.
type procCost struct {
	name, stand string
	isGo        bool
	procCounters
}

// readCounters reads p's counters now.
func readCounters(ctx context.Context, p costProc) (procCounters, error) {
	var c procCounters
	var err error
	if c.cpu, err = cpuOf(p.pid); err != nil {
		return c, err
	}
	if c.writes, err = writesOf(p.pid); err != nil {
		return c, err
	}
	if p.allocs != nil {
		if c.allocs, err = p.allocs(ctx); err != nil {
			return c, err
		}
	}
	return c, nil
}

// costSpan reads the counters of a set of processes at the start of a span
// and again at its end.
type costSpan struct {
	procs  []costProc
	before []procCounters
}

// startCosts reads the counters of procs at the start of a span.
func startCosts(ctx context.Context, procs []costProc) (*costSpan, error) {
	s := &costSpan{procs: procs}
	for _, p := range procs {
		c, err := readCounters(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("reading %s's counters: %w", p.name, err)
		}
		s.before = append(s.before, c)
	}
	return s, nil
}

// end reads the counters again and returns what each process did.
func (s *costSpan) end(ctx context.Context) ([]procCost, error) {
	out := make([]procCost, len(s.procs))
	for i, p := range s.procs {
		c, err := readCounters(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("reading %s's counters: %w", p.name, err)
		}
		b := s.before[i]
		out[i] = procCost{name: p.name, stand: p.stand, isGo: p.allocs != nil,
			procCounters: procCounters{cpu: c.cpu - b.cpu, writes: c.writes - b.writes, allocs: c.allocs - b.allocs}}
	}
	return out, nil
}

// stickydProcs are the processes of a stickyd agent: the agent itself (the
// front, the supervisor, raft) and each of its worker subprocesses, named
// by their worker id.
func stickydProcs(agent *serverProc, allocsDir string) ([]costProc, error) {
	procs := []costProc{{name: "agent", stand: standFront, pid: agent.pid(), allocs: agent.goAllocs}}
	for _, pid := range childrenOf(agent.pid()) {
		id, err := workerIDOf(pid)
		if err != nil {
			return nil, err
		}
		procs = append(procs, costProc{name: "worker " + id, stand: standBehind, pid: pid,
			allocs: func(ctx context.Context) (uint64, error) {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				return benchkit.ReadAllocs(ctx, pid, allocsDir)
			}})
	}
	if len(procs) == 1 {
		return nil, fmt.Errorf("the agent (process %d) has no worker processes", agent.pid())
	}
	return procs, nil
}

// cpuOf is the CPU time process pid has used, user and system, all its
// threads (fields 14 and 15 of /proc/PID/stat).
func cpuOf(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading process %d's CPU time: %w", pid, err)
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("process %d: unreadable stat %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:])) // from field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("process %d: short stat %q", pid, b)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("process %d: CPU time %q: %w", pid, s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// writesOf is how many write syscalls process pid has made (syscw in
// /proc/PID/io).
func writesOf(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, fmt.Errorf("reading process %d's syscalls: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "syscw:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("process %d has no syscw in /proc/%d/io", pid, pid)
}

// workerIDOf is the worker id a stickyd worker process was started with
// (STICKYD_WORKER_ID in its environment).
func workerIDOf(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return "", fmt.Errorf("reading process %d's environment: %w", pid, err)
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("STICKYD_WORKER_ID=")); ok {
			return string(v), nil
		}
	}
	return "", fmt.Errorf("process %d, a child of the agent, has no STICKYD_WORKER_ID", pid)
}
