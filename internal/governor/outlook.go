package governor

import "time"

// Outlook is what the engine sees of one worker, for the monitor: its
// saturation per watched resource at its last reading (a fraction of each
// limit), its memory history over the growth window, and when its fitted
// growth reaches the memory limit.
type Outlook struct {
	// Saturation maps each watched resource ("cpu", "memory", ...) to its
	// last figure divided by its limit.
	Saturation map[string]float64
	// Memory is the memory history, oldest first.
	Memory []MemorySample
	// MemoryLimit is the memory limit the projection aims at, in bytes.
	MemoryLimit float64
	// Ceiling is when the fitted growth reaches MemoryLimit; zero when the
	// memory does not grow or the history is too short to fit.
	Ceiling time.Time
}

// MemorySample is one memory figure of a worker.
type MemorySample struct {
	At    time.Time
	Bytes float64
}

// Outlook returns the engine's view of worker, if it has had a reading.
func (e *Engine) Outlook(name string) (Outlook, bool) {
	w := e.workers[name]
	if w == nil || w.last.At.IsZero() {
		return Outlook{}, false
	}
	p := e.policy(w.group)
	o := Outlook{Saturation: map[string]float64{}}
	for _, r := range allResources {
		if t, ok := p.Thresholds[r]; ok && t.Limit > 0 {
			o.Saturation[r.String()] = w.last.value(r) / t.Limit
		}
	}
	for _, s := range w.mem {
		o.Memory = append(o.Memory, MemorySample{At: s.at, Bytes: s.bytes})
	}
	if t, ok := p.Thresholds[Memory]; ok {
		o.MemoryLimit = t.Limit
		if g, ok := w.growth(p); ok {
			if d, ok := g.untilCeiling(t.Limit); ok {
				o.Ceiling = w.mem[len(w.mem)-1].at.Add(d)
			}
		}
	}
	return o, true
}
