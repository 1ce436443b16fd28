package governor

import (
	"fmt"
	"math"
	"time"
)

// maxSamples bounds a worker's memory history whatever the probe rate.
const maxSamples = 512

// sample is one memory figure of a worker.
type sample struct {
	at    time.Time
	bytes float64
}

// remember appends r's memory to w's history and keeps only GrowthWindow of it.
func (w *worker) remember(r Reading, p Policy) {
	w.mem = append(w.mem, sample{at: r.At, bytes: float64(r.Memory())})
	cut := 0
	for cut < len(w.mem) && (r.At.Sub(w.mem[cut].at) > p.GrowthWindow || len(w.mem)-cut > maxSamples) {
		cut++
	}
	w.mem = append(w.mem[:0], w.mem[cut:]...)
}

// growth is a least-squares line through a worker's memory history.
type growth struct {
	slope float64 // bytes per second
	now   float64 // the line's value at the last sample, in bytes
	n     int
	span  time.Duration
}

// fitGrowth fits memory = a + slope·t by least squares over s. It needs two
// samples at distinct times.
func fitGrowth(s []sample) (growth, bool) {
	n := len(s)
	if n < 2 {
		return growth{}, false
	}
	t0 := s[0].at
	var mx, my float64
	for _, x := range s {
		mx += x.at.Sub(t0).Seconds()
		my += x.bytes
	}
	mx /= float64(n)
	my /= float64(n)
	var sxy, sxx float64
	for _, x := range s {
		dx := x.at.Sub(t0).Seconds() - mx
		sxy += dx * (x.bytes - my)
		sxx += dx * dx
	}
	if sxx == 0 {
		return growth{}, false
	}
	slope := sxy / sxx
	last := s[n-1].at.Sub(t0).Seconds()
	return growth{slope: slope, now: my + slope*(last-mx), n: n, span: s[n-1].at.Sub(t0)}, true
}

// growth fits w's memory history under p's window rules: at least
// GrowthMinSamples samples spanning at least half of GrowthWindow.
func (w *worker) growth(p Policy) (growth, bool) {
	if len(w.mem) < p.GrowthMinSamples {
		return growth{}, false
	}
	g, ok := fitGrowth(w.mem)
	if !ok || g.span < p.GrowthWindow/2 {
		return growth{}, false
	}
	return g, true
}

// untilCeiling is the projected time for g to reach limit bytes; +Inf
// seconds (reported as false) when memory does not grow.
func (g growth) untilCeiling(limit float64) (time.Duration, bool) {
	if !(g.slope > 0) {
		return 0, false
	}
	left := limit - g.now
	if left <= 0 {
		return 0, true
	}
	secs := left / g.slope
	if secs > math.MaxInt64/float64(time.Second) {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// replace decides, for group g, to replace the worker whose memory is
// projected to reach its ceiling soonest, if that is within ReplaceHorizon.
// One replacement runs at a time per group.
func (e *Engine) replace(rd *round, g string, out []Decision) []Decision {
	p := e.policy(g)
	th, watched := p.Thresholds[Memory]
	if !watched || p.ReplaceHorizon <= 0 {
		return out
	}
	ws := e.workersOf(g)
	for _, w := range ws {
		if w.drain != nil && w.drain.cause == CauseReplace {
			return out
		}
	}
	var (
		best    *worker
		bestFit growth
		bestETA time.Duration
	)
	for _, w := range ws {
		if !w.available(rd.now, p) || w.retryAt.After(rd.now) {
			continue
		}
		fit, ok := w.growth(p)
		if !ok {
			continue
		}
		eta, grows := fit.untilCeiling(th.Limit)
		if !grows || eta >= p.ReplaceHorizon {
			continue
		}
		if best == nil || eta < bestETA {
			best, bestFit, bestETA = w, fit, eta
		}
	}
	if best == nil {
		return out
	}
	reason := fmt.Sprintf("%s memory grows %s/min (least squares over %d samples, %s): %s of %s ceiling, projected to reach it in %s < horizon %s: start a fresh worker, move its %s there, retire %s",
		best.name, byteSize(bestFit.slope*60), bestFit.n, dur(bestFit.span),
		byteSize(bestFit.now), byteSize(th.Limit), dur(bestETA), dur(p.ReplaceHorizon), count(best.last.Users, "user"), best.name)
	out = e.issue(rd, Decision{Kind: KindReplace, Group: g, Worker: best.name, Cause: CauseReplace, Reason: reason}, out)
	best.drain = &drain{cause: CauseReplace}
	e.group(g).starting++
	return out
}
