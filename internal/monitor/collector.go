package monitor

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector republishes the workers' probe readings as Prometheus metrics,
// labelled by worker and group, read at each scrape: a worker that is
// retired (or gone with its agent) has no series any more.
type Collector struct {
	workers func() []Worker
	descs   map[string]*prometheus.Desc
	// waiting and timedOut are the per-worker, per-backend maintenance
	// series.
	waiting, timedOut *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// workerMetrics are the per-worker series: name, help, kind.
var workerMetrics = []struct {
	name, help string
	counter    bool
	value      func(w Worker) float64
}{
	{"stickyd_worker_up", "1 when the worker is ready and answers its probes, else 0.", false, func(w Worker) float64 {
		if w.State == "ready" {
			return 1
		}
		return 0
	}},
	{"stickyd_worker_users", "People the worker holds (its last probe).", false, func(w Worker) float64 { return float64(w.Users) }},
	{"stickyd_worker_connections", "Connections the worker holds.", false, func(w Worker) float64 { return float64(w.Conns) }},
	{"stickyd_worker_pages", "Pages the worker holds.", false, func(w Worker) float64 { return float64(w.Pages) }},
	{"stickyd_worker_heap_bytes", "The worker's live Go heap.", false, func(w Worker) float64 { return float64(w.HeapBytes) }},
	{"stickyd_worker_resident_bytes", "The worker's resident memory (RSS).", false, func(w Worker) float64 { return float64(w.RSSBytes) }},
	{"stickyd_worker_cpu_seconds_total", "CPU time the worker's current process used.", true, func(w Worker) float64 { return w.CPUSeconds }},
	{"stickyd_worker_goroutines", "Goroutines of the worker.", false, func(w Worker) float64 { return float64(w.Goroutines) }},
	{"stickyd_worker_mailbox_frames", "Envelopes waiting in the worker's mailboxes.", false, func(w Worker) float64 { return float64(w.Mailbox) }},
	{"stickyd_worker_frames_total", "Frames the worker's current process handled.", true, func(w Worker) float64 { return float64(w.Frames) }},
	{"stickyd_worker_incarnation", "How many times the worker's slot was launched.", false, func(w Worker) float64 { return float64(w.Incarnation) }},
	{"stickyd_worker_probe_failures_total", "Probes the worker left unanswered.", true, func(w Worker) float64 { return float64(w.ProbeFailures) }},
	{"stickyd_worker_pages_refused_total", "Page opens refused because the connection or the person had as many pages open as they may.", true, func(w Worker) float64 { return float64(w.PagesRefused) }},
	{"stickyd_worker_state_refused_total", "Tree writes refused because they would take a page's or a person's state past its bound.", true, func(w Worker) float64 { return float64(w.StateRefused) }},
}

// NewCollector returns a collector over workers, which lists this agent's
// live workers (retired ones excluded) at each scrape.
func NewCollector(workers func() []Worker) *Collector {
	c := &Collector{workers: workers, descs: map[string]*prometheus.Desc{}}
	for _, m := range workerMetrics {
		c.descs[m.name] = prometheus.NewDesc(m.name, m.help, []string{"worker", "group"}, nil)
	}
	c.waiting = prometheus.NewDesc("stickyd_maintenance_waiting", "Requests held in the worker on a backend's maintenance window now.",
		[]string{"worker", "group", "backend"}, nil)
	c.timedOut = prometheus.NewDesc("stickyd_maintenance_timed_out_total", "Requests refused (retryable) after waiting past a maintenance window's max wait.",
		[]string{"worker", "group", "backend"}, nil)
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.waiting
	ch <- c.timedOut
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, w := range c.workers() {
		if w.State == "retired" {
			continue
		}
		for _, m := range workerMetrics {
			kind := prometheus.GaugeValue
			if m.counter {
				kind = prometheus.CounterValue
			}
			ch <- prometheus.MustNewConstMetric(c.descs[m.name], kind, m.value(w), w.ID, w.Group)
		}
		for b, n := range w.MaintenanceWaiting {
			ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(n), w.ID, w.Group, b)
		}
		for b, n := range w.MaintenanceTimedOut {
			ch <- prometheus.MustNewConstMetric(c.timedOut, prometheus.CounterValue, float64(n), w.ID, w.Group, b)
		}
	}
}
