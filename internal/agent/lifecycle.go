package agent

import (
	"context"
	"fmt"
	"sync"
)

// A part is one subsystem of the agent as Start brings it up: Start adds
// it to the list once it runs, and Shutdown takes the list down in the
// reverse order, so that every part stops before what it was started on.
// Stopping is in two passes over the same reversed list: first every
// part's prepare (announcements that must reach everything before anything
// stops: the gateway takes no new call, the pool wakes nobody), then every
// part's stop.
type part struct {
	name    string
	prepare func(ctx context.Context)
	stop    func(ctx context.Context) error
}

// parts is the agent's list of running parts.
type parts struct {
	mu   sync.Mutex
	list []part
	// stopped records the names in the order they were stopped.
	stopped []string
}

// add records a part that now runs. prepare may be nil.
func (p *parts) add(name string, prepare func(ctx context.Context), stop func(ctx context.Context) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, part{name: name, prepare: prepare, stop: stop})
}

// names lists the running parts in the order they started.
func (p *parts) names() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.list))
	for i, x := range p.list {
		out[i] = x.name
	}
	return out
}

// stopAll prepares, then stops every part, last started first, and
// empties the list. A part's error does not keep the others from
// stopping.
func (p *parts) stopAll(ctx context.Context) []error {
	p.mu.Lock()
	list := p.list
	p.list = nil
	p.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].prepare != nil {
			list[i].prepare(ctx)
		}
	}
	var errs []error
	for i := len(list) - 1; i >= 0; i-- {
		x := list[i]
		p.mu.Lock()
		p.stopped = append(p.stopped, x.name)
		p.mu.Unlock()
		if x.stop == nil {
			continue
		}
		if err := x.stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", x.name, err))
		}
	}
	return errs
}

// stoppedNames lists the parts in the order stopAll stopped them.
func (p *parts) stoppedNames() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.stopped...)
}

// Parts lists the agent's running subsystems in the order they started,
// and the ones Shutdown stopped, in the order it stopped them (for tests
// and `stickyd agent -debug` readers: the order is the design).
func (a *Agent) Parts() (running, stopped []string) {
	return a.parts.names(), a.parts.stoppedNames()
}
