package monitor

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/host"
)

// Part is one agent's part of the reading (GET /v1/monitor/local).
type Part struct {
	Agent   string   `json:"agent"`
	Workers []Worker `json:"workers"`
	// Usage is each person's running totals on this agent's workers.
	Usage map[string]Person `json:"usage"`
	// Token names this answer's usage, for the next ask of its changes
	// (?changes=TOKEN). Changes says the usage holds only the people whose
	// totals changed since the answer asked about; Gone names the people
	// no longer on this agent's workers since then.
	Token   string   `json:"token,omitempty"`
	Changes bool     `json:"changes,omitempty"`
	Gone    []string `json:"gone,omitempty"`
}

// LocalQuery is what GET /v1/monitor/local asks for.
type LocalQuery struct {
	// Users names the people whose usage is wanted (?user=, repeated);
	// nil: everyone's.
	Users map[string]bool
	// Changes (?changes=TOKEN) asks for the usage of the people whose
	// totals changed since the answer that carried TOKEN (Since), and
	// those gone since; everyone's when TOKEN is empty or not the last
	// one given. The workers come without their memory history.
	Changes bool
	Since   string
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
	usage map[string]Person
}

// changes turns the whole usage into what changed since the answer that
// carried since (all of it when since is not the last token given), and
// remembers it.
func (s *usageSent) changes(out *Part, since string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	full := out.Usage
	if since != "" && since == s.token {
		out.Changes = true
		delta := map[string]Person{}
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
	samples map[string][]Sample
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
		h.samples, h.last = map[string][]Sample{}, map[string]time.Time{}
	}
	if !w.LastProbe.After(h.last[w.ID]) {
		return
	}
	h.last[w.ID] = w.LastProbe
	s := append(h.samples[w.ID], Sample{At: w.LastProbe, Value: float64(w.HeapBytes)})
	if len(s) > historyLen {
		s = s[len(s)-historyLen:]
	}
	h.samples[w.ID] = s
}

func (h *history) of(id string) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sample(nil), h.samples[id]...)
}

// Seen records a worker's probe reading for its memory chart; a reading
// already recorded (the same probe) is ignored. Governance gives it every
// worker of this host at every round.
func (c *Cluster) Seen(w host.WorkerInfo) { c.history.record(w) }

// staleAfter is how old a ready worker's last probe answer may be before the
// monitor calls it unreachable.
func (c *Cluster) staleAfter() time.Duration {
	d := c.cfg.ProbeInterval
	if d <= 0 {
		return 0
	}
	return 3 * d
}

// groupRuntime is what runs a group's workers, from the catalog or this
// agent's configuration.
func (c *Cluster) groupRuntime(group string) string {
	if g, ok := c.cfg.Maps.Catalog().Groups[group]; ok && g.Runtime != "" {
		return g.Runtime
	}
	return c.cfg.Runtimes[group]
}

// Local describes this agent's workers and the usage of the people q names
// on them (GET /v1/monitor/local).
func (c *Cluster) Local(q LocalQuery) Part {
	users := q.Users
	out := Part{Agent: c.cfg.Agent, Usage: map[string]Person{}}
	stale := c.staleAfter()
	now := time.Now()
	for _, w := range append(c.cfg.Pool.Workers(), c.cfg.Pool.Retired()...) {
		mw := Worker{ID: w.ID, Agent: c.cfg.Agent, Group: w.Group, Runtime: c.groupRuntime(w.Group), State: w.State, Cordoned: w.Cordoned, Pid: w.Pid, SharedProcess: w.SharedProcess,
			Incarnation: w.Incarnation, Born: w.Born, DiedAt: w.DiedAt, HowDied: w.HowDied, AppVersion: w.AppVersion, Template: w.Template,
			LastProbe: w.LastProbe, Users: w.Users, Conns: w.Conns, Pages: w.Pages, HeapBytes: w.HeapBytes, RSSBytes: w.RSSBytes,
			CPUSeconds: w.CPUSeconds, Goroutines: w.Goroutines, Mailbox: w.Mailbox, Frames: w.Frames, StateRefused: w.StateRefused, PagesRefused: w.PagesRefused, ProbeFailures: w.ProbeFailures,
			MaintenanceWaiting: w.MaintenanceWaiting, MaintenanceTimedOut: w.MaintenanceTimedOut}
		if !q.Changes {
			mw.Memory = c.history.of(w.ID)
		}
		if w.State == host.StateReady && stale > 0 {
			seen := w.LastProbe
			if seen.IsZero() {
				seen = w.Born
			}
			if now.Sub(seen) > stale {
				mw.State = StateUnreachable
			}
		}
		if c.cfg.Outlook != nil {
			if o, ok := c.cfg.Outlook(w.ID); ok {
				mw.Saturation, mw.MemoryLimit = o.Saturation, o.MemoryLimit
				if !o.Ceiling.IsZero() {
					ceiling := o.Ceiling
					mw.Projection = &ceiling
				}
			}
		}
		out.Workers = append(out.Workers, mw)
		if w.State != host.StateRetired && (users == nil || len(users) > 0) {
			for user, u := range c.cfg.Pool.Usage(w.ID) {
				if users != nil && !users[user] {
					continue
				}
				out.Usage[user] = Person{User: user, Worker: w.ID, Pages: u.Pages, BusySeconds: u.BusySeconds, Frames: u.Frames, StateBytes: u.StateBytes}
			}
		}
	}
	if q.Changes {
		c.usageSent.changes(&out, q.Since)
	}
	return out
}
