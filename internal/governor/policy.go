package governor

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"time"
)

// Threshold is the saturation rule of one resource.
type Threshold struct {
	// Limit is what 100% means, in the resource's unit: cores for cpu,
	// bytes for memory (also the ceiling replacement projects towards),
	// goroutines, queued frames. It must be positive.
	Limit float64
	// High is the fraction of Limit above which a worker starts giving up
	// users (0.85 = 85%). It must be in (0, 1].
	High float64
	// Low is the fraction of Limit under which a worker that went over High
	// stops giving up users: between Low and High it keeps shedding
	// (hysteresis). A worker receives users only when every watched resource
	// is under its Low. It must be in [0, High).
	Low float64
}

// level is v as a fraction of the limit.
func (t Threshold) level(v float64) float64 { return v / t.Limit }

// Policy is how one group is governed. Start from DefaultPolicy and change
// what differs; the zero Policy is not useful (and fails Validate). Every
// field is used as given: there is no hidden default.
type Policy struct {
	// Thresholds holds the saturation rule per resource; a resource absent
	// from the map is not watched. Default: cpu 1 core 80%/60%, memory
	// 1 GiB 85%/75%, goroutines 10000 80%/60%, mailbox 1000 frames 80%/50%.
	Thresholds map[Resource]Threshold
	// MinWorkers is the fewest workers compaction leaves in the group.
	// Default 1. The engine never starts workers to reach it: the hosts
	// launch a group's initial workers.
	MinWorkers int
	// MaxWorkers is the most workers saturation may start; 0 means no bound.
	// A replacement may exceed it by one while it runs, since the worker it
	// replaces is retired at its end. Default 8.
	MaxWorkers int
	// MaxConcurrentMoves bounds the moves on the road: the engine decides a
	// move for this group only while fewer than this many run (counting the
	// caller's inFlight and the engine's own moves not yet Done). Default 4.
	MaxConcurrentMoves int
	// UserCoolDown is how long after a move of a user completes (or fails)
	// the engine will not choose that user again. Default 10 min.
	UserCoolDown time.Duration
	// WorkerCoolDown is how long after a saturation move completes its
	// source and destination are not chosen again as source or destination
	// of a saturation move; also the wait before a failed start, replacement
	// or retirement of that worker is tried again. Draining ignores it.
	// Default 30 s.
	WorkerCoolDown time.Duration
	// StaleAfter is the age past which a worker's last reading is not
	// trusted: the worker is neither source nor destination, is never
	// retired, and holds compaction back. Default 30 s.
	StaleAfter time.Duration
	// StartGrace is how long a started worker counts in the group before its
	// first reading arrives; after it, the start is assumed lost. Default 2 min.
	StartGrace time.Duration
	// GrowthWindow is the span of memory history the growth fit uses. A fit
	// needs samples spanning at least half of it. Default 15 min.
	GrowthWindow time.Duration
	// GrowthMinSamples is the fewest samples a fit uses; at least 2.
	// Default 6.
	GrowthMinSamples int
	// ReplaceHorizon: a worker whose memory is projected to reach the memory
	// Limit sooner than this is replaced. 0 disables replacement (as does an
	// unwatched memory). Default 30 min.
	ReplaceHorizon time.Duration
	// CompactBelow is the low-water mark, a fraction of each Limit: when
	// every worker of the group is under it on every watched resource for
	// CompactAfter, the least loaded worker is drained and retired. 0
	// disables compaction. Default 0.30.
	CompactBelow float64
	// CompactAfter is how long the group must stay under CompactBelow before
	// a worker is drained. Default 10 min.
	CompactAfter time.Duration
	// UsageWait is how many readings a hot worker waits for its people's
	// numbers to show the consumption behind its level before drawing who
	// leaves: a probe may show a worker's heap jump a reading before its
	// per-person accounting shows who grew. While the people's recent
	// consumption is nil (or, for memory, under a quarter of the worker's rise
	// over the same readings) the engine waits, and records why; after
	// UsageWait such readings it draws with what there is (uniformly when
	// nobody shows any). 0 never waits. Default 2.
	UsageWait int
}

// DefaultPolicy returns the defaults documented on each Policy field.
func DefaultPolicy() Policy {
	return Policy{
		Thresholds: map[Resource]Threshold{
			CPU:        {Limit: 1, High: 0.80, Low: 0.60},
			Memory:     {Limit: 1 << 30, High: 0.85, Low: 0.75},
			Goroutines: {Limit: 10000, High: 0.80, Low: 0.60},
			Mailbox:    {Limit: 1000, High: 0.80, Low: 0.50},
		},
		MinWorkers:         1,
		MaxWorkers:         8,
		MaxConcurrentMoves: 4,
		UserCoolDown:       10 * time.Minute,
		WorkerCoolDown:     30 * time.Second,
		StaleAfter:         30 * time.Second,
		StartGrace:         2 * time.Minute,
		GrowthWindow:       15 * time.Minute,
		GrowthMinSamples:   6,
		ReplaceHorizon:     30 * time.Minute,
		CompactBelow:       0.30,
		CompactAfter:       10 * time.Minute,
		UsageWait:          2,
	}
}

// Validate reports the first inconsistency of p, or nil.
func (p Policy) Validate() error {
	for _, r := range allResources {
		t, ok := p.Thresholds[r]
		if !ok {
			continue
		}
		switch {
		case !(t.Limit > 0) || math.IsInf(t.Limit, 0):
			return fmt.Errorf("%s threshold: limit %v must be a positive number", r, t.Limit)
		case !(t.High > 0 && t.High <= 1):
			return fmt.Errorf("%s threshold: high mark %v must be in (0, 1]", r, t.High)
		case !(t.Low >= 0 && t.Low < t.High):
			return fmt.Errorf("%s threshold: low mark %v must be in [0, high mark %v)", r, t.Low, t.High)
		}
	}
	for r := range p.Thresholds {
		if r < CPU || r > Mailbox {
			return fmt.Errorf("threshold for unknown %s", r)
		}
	}
	switch {
	case p.MinWorkers < 0:
		return errors.New("min workers must not be negative")
	case p.MaxWorkers < 0:
		return errors.New("max workers must not be negative (0 means no bound)")
	case p.MaxWorkers > 0 && p.MaxWorkers < p.MinWorkers:
		return fmt.Errorf("max workers %d is below min workers %d", p.MaxWorkers, p.MinWorkers)
	case p.UsageWait < 0:
		return errors.New("usage wait must not be negative")
	case p.MaxConcurrentMoves < 1:
		return errors.New("max concurrent moves must be at least 1")
	case p.UserCoolDown < 0, p.WorkerCoolDown < 0, p.StaleAfter < 0, p.StartGrace < 0,
		p.GrowthWindow < 0, p.ReplaceHorizon < 0, p.CompactAfter < 0:
		return errors.New("durations must not be negative")
	case p.StaleAfter == 0:
		return errors.New("stale after must be positive: a reading must be trusted for some time")
	case p.ReplaceHorizon > 0 && (p.GrowthWindow == 0 || p.GrowthMinSamples < 2):
		return errors.New("replacement needs a growth window and at least 2 samples")
	case !(p.CompactBelow >= 0 && p.CompactBelow < 1):
		return fmt.Errorf("compact below %v must be in [0, 1)", p.CompactBelow)
	}
	return nil
}

// clone copies p so that the caller may reuse its map.
func (p Policy) clone() Policy {
	p.Thresholds = maps.Clone(p.Thresholds)
	return p
}
