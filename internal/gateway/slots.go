package gateway

import (
	"container/list"
	"context"
	"sync"
)

// Slots is a model's concurrency limit on one node: at most Capacity calls
// run at once; the others wait in arrival order, at most QueueMax of them.
// In a cluster the node's capacity is its share of the model's aggregate
// limit, set by the leader (SetCapacity): the shares add up to the limit.
type Slots struct {
	mu       sync.Mutex // guards the rest
	capacity int
	queueMax int
	inFlight int
	waiting  *list.List // of chan struct{}, closed when granted
}

// NewSlots returns slots of the given capacity and queue bound.
func NewSlots(capacity, queueMax int) *Slots {
	return &Slots{capacity: capacity, queueMax: queueMax, waiting: list.New()}
}

// Acquire takes a slot, waiting in line for one; it returns ErrQueueFull at
// once when the line is at its bound, and ctx's error (the caller maps a
// deadline to ErrQueueTimeout) when ctx ends first. queued reports whether
// the call had to wait.
func (s *Slots) Acquire(ctx context.Context) (release func(), queued bool, err error) {
	return s.acquire(ctx, true)
}

// AcquireQueued takes a slot like Acquire, but for a call already accepted
// into a persisted queue (bounded where it was accepted): it is never
// refused for the line's length, and waits until ctx ends.
func (s *Slots) AcquireQueued(ctx context.Context) (release func(), queued bool, err error) {
	return s.acquire(ctx, false)
}

func (s *Slots) acquire(ctx context.Context, bounded bool) (release func(), queued bool, err error) {
	s.mu.Lock()
	if s.inFlight < s.capacity && s.waiting.Len() == 0 {
		s.inFlight++
		s.mu.Unlock()
		return s.releaser(), false, nil
	}
	if bounded && s.waiting.Len() >= s.queueMax {
		s.mu.Unlock()
		return nil, true, ErrQueueFull
	}
	ch := make(chan struct{})
	e := s.waiting.PushBack(ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return s.releaser(), true, nil
	case <-ctx.Done():
		s.mu.Lock()
		select {
		case <-ch:
			// Granted as ctx ended: give the slot on.
			s.mu.Unlock()
			s.releaser()()
		default:
			s.waiting.Remove(e)
			s.mu.Unlock()
		}
		return nil, true, ctx.Err()
	}
}

func (s *Slots) releaser() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.inFlight--
			s.grantLocked()
		})
	}
}

// grantLocked hands free slots to the first in line.
func (s *Slots) grantLocked() {
	for s.inFlight < s.capacity && s.waiting.Len() > 0 {
		ch := s.waiting.Remove(s.waiting.Front()).(chan struct{})
		s.inFlight++
		close(ch)
	}
}

// SetCapacity changes the capacity. A lower one takes effect as running
// calls end: none is stopped.
func (s *Slots) SetCapacity(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.capacity = n
	s.grantLocked()
}

// Stats are the slots' numbers now.
type SlotStats struct {
	Capacity int `json:"capacity"`
	InFlight int `json:"in_flight"`
	Queued   int `json:"queued"`
	QueueMax int `json:"queue_max"`
}

// Stats returns the numbers now.
func (s *Slots) Stats() SlotStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SlotStats{Capacity: s.capacity, InFlight: s.inFlight, Queued: s.waiting.Len(), QueueMax: s.queueMax}
}
