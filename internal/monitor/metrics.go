package monitor

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/plugins/worker/channel"
)

// registerMetrics publishes the workers' probe readings and the raft
// member's state in the agent's registry.
func (c *Cluster) registerMetrics() error {
	workers := func() []Worker { return c.Local(LocalQuery{Users: map[string]bool{}}).Workers }
	cs := []prometheus.Collector{
		NewCollector(workers),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_raft_leader", Help: "1 when this server is the raft leader."}, func() float64 {
			if c.cfg.Raft.IsLeader() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_raft_applied_index", Help: "The last raft index applied to this server's maps."}, func() float64 {
			return float64(c.cfg.Maps.Index())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_supervisor_users", Help: "People in the maps."}, func() float64 {
			_, users := c.cfg.Maps.Counts()
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
	if held := c.cfg.Held; held != nil {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_move_held_bytes", Help: "Bytes of moved people's packages held in memory until their next frame (bound: move.held_bytes)."}, func() float64 {
				_, b, _ := held.Held()
				return float64(b)
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stickyd_move_held_packages", Help: "Moved people's packages held in memory until their next frame."}, func() float64 {
				n, _, _ := held.Held()
				return float64(n)
			}),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stickyd_move_held_spills_total", Help: "Moved people's packages written to disk at once because move.held_bytes was reached."}, func() float64 {
				_, _, n := held.Held()
				return float64(n)
			}),
		)
	}
	for _, m := range cs {
		if err := c.cfg.Registry.Register(m); err != nil {
			return fmt.Errorf("registering monitor metrics: %w", err)
		}
	}
	return nil
}
