package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/stickyd/stickyd/internal/consul"
	"github.com/stickyd/stickyd/internal/freeport"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/placement"
)

// mirrorResult is the Consul mirror's lag: from an entry's commit to the
// registry's index key saying it is readable (the index key is written
// after everything before it).
type mirrorResult struct {
	people        int
	rate          int
	full          time.Duration // the first publish of everyone
	changes       int
	p50, p99, max time.Duration
}

func (m *mirrorResult) rows(row func(k, v string)) {
	row(fmt.Sprintf("consul mirror: first publish of %d people (real Consul agent)", m.people), ms(m.full))
	row(fmt.Sprintf("consul mirror: lag commit → readable at %d changes/s", m.rate), fmt.Sprintf("p50 %s, p99 %s, max %s (%d changes)", ms(m.p50), ms(m.p99), ms(m.max), m.changes))
}

// fsmRegistry is the registry the agent publishes, read from the maps: a
// worker's group and host as the hosts registered them.
type fsmRegistry struct {
	f      *fsm.FSM
	groups map[string]json.RawMessage
	hostOf func(worker string) string
}

func (r fsmRegistry) user(u placement.UserInfo) consul.User {
	return consul.User{Worker: u.Worker, Epoch: u.Epoch, State: u.State, Group: "default", Host: r.hostOf(u.Worker)}
}

func (r fsmRegistry) Changes() (uint64, map[string]*consul.User, bool) {
	index, changed, all := r.f.TakeChanges()
	if all {
		return index, nil, true
	}
	out := make(map[string]*consul.User, len(changed))
	for name, u := range changed {
		if u == nil {
			out[name] = nil
			continue
		}
		e := r.user(*u)
		out[name] = &e
	}
	return index, out, false
}

func (r fsmRegistry) Placement(index uint64) consul.Placement {
	p := consul.Placement{Index: index, Users: map[string]consul.User{}, Groups: r.groups}
	for _, u := range r.f.Users() {
		p.Users[u.User] = r.user(u)
	}
	return p
}

func (r fsmRegistry) Groups() map[string]json.RawMessage { return r.groups }

// startConsul runs a Consul agent in dev mode on free ports.
func startConsul(ctx context.Context, bin, dir string, stderr io.Writer) (addr string, stop func(), err error) {
	ports, err := freeport.Take(4)
	if err != nil {
		return "", nil, err
	}
	addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	cmd := exec.CommandContext(ctx, bin, "agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-http-port", strconv.Itoa(ports[0]), "-dns-port", "-1", "-grpc-port", "-1",
		"-serf-lan-port", strconv.Itoa(ports[1]), "-serf-wan-port", strconv.Itoa(ports[2]), "-server-port", strconv.Itoa(ports[3]),
		"-data-dir", filepath.Join(dir, "consul"), "-log-level", "error")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = addr
	c, _ := api.NewClient(cfg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if l, err := c.Status().Leader(); err == nil && l != "" {
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("consul at %s not ready in 30 s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func measureMirror(ctx context.Context, o options, dir string, stderr io.Writer) (mirrorResult, error) {
	r := mirrorResult{people: o.mirrorPeople, rate: o.mirrorRate}
	addr, stop, err := startConsul(ctx, o.consul, dir, stderr)
	if err != nil {
		return r, err
	}
	defer stop()
	f := fsm.New()
	var index uint64
	mo := o
	mo.people = o.mirrorPeople
	hosts := map[string]string{}
	for h := range o.hosts {
		ws := map[string]string{}
		for w := range o.workers {
			ws[workerName(h, w)] = "default"
			hosts[workerName(h, w)] = fmt.Sprintf("h%03d", h)
		}
		index++
		if _, err := applyOne(f, index, fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: fmt.Sprintf("h%03d", h), Workers: ws}); err != nil {
			return r, err
		}
	}
	if err := fillMaps(f, mo, &index); err != nil {
		return r, err
	}
	client, err := consul.New(consul.Config{Address: addr})
	if err != nil {
		return r, err
	}
	reg := fsmRegistry{f: f, groups: map[string]json.RawMessage{"default": json.RawMessage(`{"name":"default"}`)},
		hostOf: func(w string) string { return hosts[w] }}
	m := consul.NewMirror(client)
	t0 := time.Now()
	if err := m.Sync(ctx, reg); err != nil {
		return r, fmt.Errorf("first publish: %w", err)
	}
	r.full = time.Since(t0)
	fmt.Fprintf(stderr, "mirror: %d people published in %v\n", mo.people, r.full.Round(time.Millisecond))

	// The mirror's loop, as the leader runs it.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var loopErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			if err := m.Sync(runCtx, reg); err != nil && runCtx.Err() == nil {
				loopErr = err
				return
			}
		}
	}()

	// The reader: each time the index key moves, every change at or below
	// it is readable.
	type commit struct {
		index uint64
		at    time.Time
	}
	var (
		mu      sync.Mutex
		pending []commit
		lags    []time.Duration
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		cfg := api.DefaultNonPooledConfig()
		cfg.Address = addr
		reader, err := api.NewClient(cfg)
		if err != nil {
			return
		}
		kv := reader.KV()
		var wait uint64
		for runCtx.Err() == nil {
			q := (&api.QueryOptions{WaitIndex: wait, WaitTime: time.Second}).WithContext(runCtx)
			pair, meta, err := kv.Get(client.Key("placement/index"), q)
			if err != nil {
				continue
			}
			now := time.Now()
			wait = meta.LastIndex
			if pair == nil {
				continue
			}
			n, err := strconv.ParseUint(string(pair.Value), 10, 64)
			if err != nil {
				continue
			}
			mu.Lock()
			k := 0
			for k < len(pending) && pending[k].index <= n {
				lags = append(lags, now.Sub(pending[k].at))
				k++
			}
			pending = pending[k:]
			mu.Unlock()
		}
	}()

	// The changes: people moved one by one (two entries each, two changes
	// of the registry), at the rate asked, for the duration.
	interval := time.Second / time.Duration(o.mirrorRate)
	next := time.Now()
	end := next.Add(o.mirrorFor)
	for n := 0; time.Now().Before(end); n++ {
		i := (n * 7919) % mo.people
		u, _ := f.User(personName(i))
		to := workerName((i+1+n)%o.hosts, n%o.workers)
		parts := []fsm.MoveBatchRequest{
			{Begin: []fsm.MoveBeginRequest{{User: u.User, From: u.Worker, To: to, Epoch: u.Epoch}}},
			{Commit: []fsm.MoveCommitRequest{{User: u.User, To: to, Epoch: u.Epoch + 1}}},
		}
		for _, p := range parts {
			index++
			if _, err := applyOne(f, index, fsm.MoveBatchRequestType, p); err != nil {
				return r, err
			}
			mu.Lock()
			pending = append(pending, commit{index, time.Now()})
			mu.Unlock()
			next = next.Add(interval)
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
		}
	}
	// The last changes drain.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		left := len(pending)
		mu.Unlock()
		if left == 0 || time.Now().After(deadline) || loopErr != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if loopErr != nil {
		return r, fmt.Errorf("the mirror: %w", loopErr)
	}
	if len(pending) > 0 {
		return r, fmt.Errorf("%d changes never became readable", len(pending))
	}
	slices.Sort(lags)
	r.changes = len(lags)
	if len(lags) > 0 {
		r.p50 = lags[len(lags)/2]
		r.p99 = lags[len(lags)*99/100]
		r.max = lags[len(lags)-1]
	}
	fmt.Fprintf(stderr, "mirror: %d changes, lag p50 %v p99 %v max %v\n", r.changes, r.p50, r.p99, r.max)
	return r, nil
}

// consulBinary is the Consul agent the mirror phase runs: -consul, else the
// one `make tools` builds, else one on the PATH.
func consulBinary(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if _, err := os.Stat("bin/consul"); err == nil {
		return filepath.Abs("bin/consul")
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no Consul agent: give -consul, or run make tools (bin/consul)")
}
