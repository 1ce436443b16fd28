package supervisor

import (
	"sync"
	"time"
)

// Placement reads the maps' counts at the start of a burst of newcomers and
// then counts its own placements on top of them until the burst is over:
// the maps lag a burst (a connection is written in a batch after the site
// answered, some workers' newcomers before others'), and placement by the
// maps alone, or by the maps plus the placements not yet written, swings
// with every batch that lands.
const (
	// placedQuiet is the pause in placements after which the maps are
	// read again: by then the burst's connections are in them.
	placedQuiet = 2 * time.Second
	// placedStale bounds how long a burst places on counts of its own
	// (people leave and move meanwhile).
	placedStale = 30 * time.Second
)

// placer picks a newcomer's worker.
type placer struct {
	mu     sync.Mutex
	base   map[string]int // the maps' people per worker when the burst began
	placed map[string]int // placements since
	baseAt time.Time
	last   time.Time // the last placement
}

// pick returns the worker of ready with the fewest people, the maps' count
// (read by usersOn when a burst begins) plus the burst's placements, ties
// broken from start on; it counts the placement.
func (p *placer) pick(ready []string, usersOn func() map[string]int, start int, now time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.base == nil || now.Sub(p.last) > placedQuiet || now.Sub(p.baseAt) > placedStale {
		p.base, p.placed, p.baseAt = usersOn(), map[string]int{}, now
	}
	best, bestLoad := "", 0
	for i := range ready {
		w := ready[(start+i)%len(ready)]
		if l := p.base[w] + p.placed[w]; best == "" || l < bestLoad {
			best, bestLoad = w, l
		}
	}
	p.placed[best]++
	p.last = now
	return best
}
