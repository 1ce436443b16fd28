package agent

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/channel"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/maintenance"
	"github.com/stickyd/stickyd/internal/monitor"
)

// The monitor's reading: each agent describes its own workers (from its
// hosts' last probe readings: nothing waits on a worker) and the usage of
// the people on them; the agent asked composes every agent's part with the
// maps. An agent that does not answer shows its last known part, its
// workers unreachable.

// LocalMonitor is one agent's part of the reading (GET /v1/monitor/local).
type LocalMonitor struct {
	Agent   string           `json:"agent"`
	Workers []monitor.Worker `json:"workers"`
	// Usage is each person's running totals on this agent's workers.
	Usage map[string]monitor.Person `json:"usage"`
	// Token names this answer's usage, for the next ask of its changes
	// (?changes=TOKEN). Changes says the usage holds only the people whose
	// totals changed since the answer asked about; Gone names the people
	// no longer on this agent's workers since then.
	Token   string   `json:"token,omitempty"`
	Changes bool     `json:"changes,omitempty"`
	Gone    []string `json:"gone,omitempty"`
}

// usageSent is the usage of the last answer that asked for changes (the
// leader's governance, every probe interval), kept so that the next one
// carries only what changed: at a hundred thousand people a host, the
// whole usage is megabytes, and most people's totals stand still between
// two probes.
type usageSent struct {
	mu    sync.Mutex
	token string
	n     uint64
	usage map[string]monitor.Person
}

// changes turns the whole usage into what changed since the answer that
// carried since (all of it when since is not the last token given), and
// remembers it.
func (s *usageSent) changes(out *LocalMonitor, since string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	full := out.Usage
	if since != "" && since == s.token {
		out.Changes = true
		delta := map[string]monitor.Person{}
		for u, p := range full {
			if old, ok := s.usage[u]; !ok || old != p {
				delta[u] = p
			}
		}
		for u := range s.usage {
			if _, ok := full[u]; !ok {
				out.Gone = append(out.Gone, u)
			}
		}
		sort.Strings(out.Gone)
		out.Usage = delta
	}
	s.n++
	s.token = fmt.Sprintf("%x-%d", time.Now().UnixNano(), s.n)
	s.usage = full
	out.Token = s.token
}

// history keeps each worker's recent heap readings for the monitor's chart.
type history struct {
	mu      sync.Mutex
	samples map[string][]monitor.Sample
	last    map[string]time.Time
}

const historyLen = 300

// record adds a worker's reading, once per probe.
func (h *history) record(w host.WorkerInfo) {
	if w.LastProbe.IsZero() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.samples == nil {
		h.samples, h.last = map[string][]monitor.Sample{}, map[string]time.Time{}
	}
	if !w.LastProbe.After(h.last[w.ID]) {
		return
	}
	h.last[w.ID] = w.LastProbe
	s := append(h.samples[w.ID], monitor.Sample{At: w.LastProbe, Value: float64(w.HeapBytes)})
	if len(s) > historyLen {
		s = s[len(s)-historyLen:]
	}
	h.samples[w.ID] = s
}

func (h *history) of(id string) []monitor.Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]monitor.Sample(nil), h.samples[id]...)
}

// staleAfter is how old a ready worker's last probe answer may be before the
// monitor calls it unreachable.
func (a *Agent) staleAfter() time.Duration {
	d := duration(a.cfg.Probe.Interval)
	if d <= 0 {
		return 0
	}
	return 3 * d
}

// groupRuntime is what runs a group's workers, from the catalog or this
// agent's configuration.
func (a *Agent) groupRuntime(group string) string {
	if g, ok := a.fsm.Catalog().Groups[group]; ok && g.Runtime != "" {
		return g.Runtime
	}
	for _, g := range a.cfg.Groups {
		if g.Name != group {
			continue
		}
		switch {
		case g.Builtin != "":
			return RuntimeBuiltin
		case g.Plugin != nil && g.Plugin.Runtime != "":
			return g.Plugin.Runtime
		}
		return RuntimeGoPlugin
	}
	return ""
}

// localMonitor describes this agent's workers and the usage of the people
// q names on them.
func (a *Agent) localMonitor(q api.LocalQuery) LocalMonitor {
	users := q.Users
	out := LocalMonitor{Agent: a.cfg.Name, Usage: map[string]monitor.Person{}}
	stale := a.staleAfter()
	now := time.Now()
	for _, w := range append(a.pool.Workers(), a.pool.Retired()...) {
		mw := monitor.Worker{ID: w.ID, Agent: a.cfg.Name, Group: w.Group, Runtime: a.groupRuntime(w.Group), State: w.State, Cordoned: w.Cordoned, Pid: w.Pid, SharedProcess: w.SharedProcess,
			Incarnation: w.Incarnation, Born: w.Born, DiedAt: w.DiedAt, HowDied: w.HowDied, AppVersion: w.AppVersion,
			LastProbe: w.LastProbe, Users: w.Users, Conns: w.Conns, Pages: w.Pages, HeapBytes: w.HeapBytes, RSSBytes: w.RSSBytes,
			CPUSeconds: w.CPUSeconds, Goroutines: w.Goroutines, Mailbox: w.Mailbox, Frames: w.Frames, StateRefused: w.StateRefused, PagesRefused: w.PagesRefused, ProbeFailures: w.ProbeFailures,
			MaintenanceWaiting: w.MaintenanceWaiting, MaintenanceTimedOut: w.MaintenanceTimedOut}
		if !q.Changes {
			mw.Memory = a.history.of(w.ID)
		}
		if w.State == host.StateReady && stale > 0 {
			seen := w.LastProbe
			if seen.IsZero() {
				seen = w.Born
			}
			if now.Sub(seen) > stale {
				mw.State = monitor.StateUnreachable
			}
		}
		if o, ok := a.govern.Outlook(w.ID); ok {
			mw.Saturation, mw.MemoryLimit = o.Saturation, o.MemoryLimit
			if !o.Ceiling.IsZero() {
				c := o.Ceiling
				mw.Projection = &c
			}
		}
		out.Workers = append(out.Workers, mw)
		if w.State != host.StateRetired && (users == nil || len(users) > 0) {
			for user, u := range a.pool.Usage(w.ID) {
				if users != nil && !users[user] {
					continue
				}
				out.Usage[user] = monitor.Person{User: user, Worker: w.ID, Pages: u.Pages, BusySeconds: u.BusySeconds, Frames: u.Frames, StateBytes: u.StateBytes}
			}
		}
	}
	if q.Changes {
		a.usageSent.changes(&out, q.Since)
	}
	return out
}

// monitorView composes the whole pool's reading with the first page of
// people.
func (a *Agent) monitorView(ctx context.Context) (monitor.View, error) {
	return a.monitorPage(ctx, fsm.UserQuery{Limit: monitor.DefaultLimit})
}

// monitorPage composes the whole pool's reading with the page of people q
// selects: every agent is asked for its workers and for the usage of that
// page's people only, so a reading costs a page, not the population.
func (a *Agent) monitorPage(ctx context.Context, q fsm.UserQuery) (monitor.View, error) {
	_, leader := a.raft.Leader()
	v := monitor.View{At: time.Now(), Agent: a.cfg.Name, Leader: leader, Default: a.sup.DefaultGroup(), Events: a.govern.Events()}
	page := (people{sup: a.sup, maps: a.fsm, gw: a.gw}).UsersPage(q)
	v.Tally = a.fsm.Tally()
	v.Next = monitor.EncodeCursor(page.Next)
	names := make(map[string]bool, len(page.Users))
	ask := url.Values{"user": {""}}
	for _, u := range page.Users {
		names[u.User] = true
		ask.Add("user", u.User)
	}
	parts := []LocalMonitor{a.localMonitor(api.LocalQuery{Users: names})}
	answers := askOthers[LocalMonitor](ctx, a, "/v1/monitor/local?"+ask.Encode(), time.Second)
	for _, ag := range a.fsm.Agents() {
		if ag.Name == a.cfg.Name {
			continue
		}
		part, ok := answers[ag.Name]
		a.monMu.Lock()
		if ok {
			if a.lastParts == nil {
				a.lastParts = map[string]LocalMonitor{}
			}
			a.lastParts[ag.Name] = part
		} else {
			v.Unreachable = append(v.Unreachable, ag.Name)
			last := a.lastParts[ag.Name]
			// A copy: the cached part stays as it was read.
			part = LocalMonitor{Agent: ag.Name, Workers: append([]monitor.Worker(nil), last.Workers...), Usage: last.Usage}
			if len(part.Workers) == 0 {
				for id, g := range ag.Workers {
					part.Workers = append(part.Workers, monitor.Worker{ID: id, Agent: ag.Name, Group: g})
				}
			}
			for i := range part.Workers {
				if part.Workers[i].State != host.StateRetired {
					part.Workers[i].State = monitor.StateUnreachable
				}
			}
		}
		a.monMu.Unlock()
		parts = append(parts, part)
	}
	usage := map[string]monitor.Person{}
	for _, p := range parts {
		v.Workers = append(v.Workers, p.Workers...)
		for u, x := range p.Usage {
			usage[u] = x
		}
	}
	sort.SliceStable(v.Workers, func(i, j int) bool {
		ri, rj := v.Workers[i].State == host.StateRetired, v.Workers[j].State == host.StateRetired
		if ri != rj {
			return rj
		}
		if v.Workers[i].Agent != v.Workers[j].Agent {
			return v.Workers[i].Agent < v.Workers[j].Agent
		}
		return v.Workers[i].ID < v.Workers[j].ID
	})
	v.People = monitor.PeopleOf(page.Users, a.router.GroupOf, usage)
	v.Maintenance = maintenance.Windows(a.fsm.Maintenance(), v.Workers)
	return v, nil
}

// registerMonitorMetrics publishes the workers' probe readings and the
// raft member's state in the agent's registry.
func (a *Agent) registerMonitorMetrics() error {
	workers := func() []monitor.Worker { return a.localMonitor(api.LocalQuery{Users: map[string]bool{}}).Workers }
	cs := []prometheus.Collector{
		monitor.NewCollector(workers),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_raft_leader", Help: "1 when this server is the raft leader."}, func() float64 {
			if a.raft.IsLeader() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_raft_applied_index", Help: "The last raft index applied to this server's maps."}, func() float64 {
			return float64(a.fsm.Index())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_supervisor_users", Help: "People in the maps."}, func() float64 {
			_, users := a.fsm.Counts()
			return float64(users)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stickyd_worker_channel_writes_total", Help: "Writes to the workers' framed channels, each of every envelope queued since the last."}, func() float64 {
			return float64(channel.ReadFramedStats().Writes)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stickyd_worker_channel_envelopes_total", Help: "Envelopes sent on the workers' framed channels."}, func() float64 {
			return float64(channel.ReadFramedStats().Envelopes)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stickyd_worker_channel_bytes_total", Help: "Bytes written to the workers' framed channels."}, func() float64 {
			return float64(channel.ReadFramedStats().Bytes)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stickyd_worker_channel_waits_total", Help: "Sends that waited for room in a framed channel's queue (bound: 4 MiB a channel)."}, func() float64 {
			return float64(channel.ReadFramedStats().Waits)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_worker_channel_queued_bytes", Help: "Bytes encoded for the workers' framed channels and not yet written."}, func() float64 {
			return float64(channel.ReadFramedStats().QueuedBytes)
		}),
	}
	if a.held != nil {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_move_held_bytes", Help: "Bytes of moved people's packages held in memory until their next frame (bound: move.held_bytes)."}, func() float64 {
				_, b, _ := a.held.Held()
				return float64(b)
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_move_held_packages", Help: "Moved people's packages held in memory until their next frame."}, func() float64 {
				n, _, _ := a.held.Held()
				return float64(n)
			}),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stickyd_move_held_spills_total", Help: "Moved people's packages written to disk at once because move.held_bytes was reached."}, func() float64 {
				_, _, n := a.held.Held()
				return float64(n)
			}),
		)
	}
	for _, c := range cs {
		if err := a.registry.Register(c); err != nil {
			return fmt.Errorf("registering monitor metrics: %w", err)
		}
	}
	return nil
}

// workersView is GET /v1/workers: this agent's workers (retired slots
// included) and, unless local, those of every other agent in the maps, as
// each answers GET /v1/workers?local=true within 2 s; an agent that does
// not answer has its registered workers listed as unreachable. So
// `stickyd worker list` through a server that runs no worker lists the
// hosts' workers.
func (a *Agent) workersView(ctx context.Context, local bool) any {
	out := append(a.pool.Workers(), a.pool.Retired()...)
	if local {
		return out
	}
	agents := a.fsm.Agents()
	sort.Slice(agents, func(i, j int) bool { return agents[i].Name < agents[j].Name })
	answers := askOthers[[]host.WorkerInfo](ctx, a, "/v1/workers?local=true", 2*time.Second)
	for _, ag := range agents {
		if ag.Name == a.cfg.Name || len(ag.Workers) == 0 {
			continue
		}
		if ws, ok := answers[ag.Name]; ok {
			out = append(out, ws...)
			continue
		}
		ids := make([]string, 0, len(ag.Workers))
		for id := range ag.Workers {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			out = append(out, host.WorkerInfo{ID: id, Group: ag.Workers[id], State: monitor.StateUnreachable})
		}
	}
	return out
}

// askOthers calls GET path on every other agent in the maps at once, each
// call bounded by timeout, and returns the answers decoded as T by agent
// name; an agent that did not answer in time is absent.
func askOthers[T any](ctx context.Context, a *Agent, path string, timeout time.Duration) map[string]T {
	return askEach[T](ctx, a, func(string) string { return path }, timeout)
}

// askEach is askOthers with a path of each agent's own (pathOf its name).
func askEach[T any](ctx context.Context, a *Agent, pathOf func(agent string) string, timeout time.Duration) map[string]T {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]T{}
	)
	for _, ag := range a.fsm.Agents() {
		if ag.Name == a.cfg.Name || ag.AdminAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			var v T
			if err := a.call(cctx, "GET", ag.AdminAddr, pathOf(ag.Name), nil, &v); err != nil {
				return
			}
			mu.Lock()
			out[ag.Name] = v
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}
