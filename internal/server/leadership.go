// Package server holds what a raft member does as a server: who owns
// leadership and the work that runs only while this server leads.
package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A Task is leader-only work. Run starts once this server leads and its
// log is current (a barrier was applied), and must return soon after stop
// closes: when leadership is lost or the server stops. A Task that is done
// before that (a one-off step of gaining leadership) may return early.
type Task struct {
	Name string
	Run  func(stop <-chan struct{})
}

// Leadership is the one owner of raft's leadership notifications, as
// Nomad's monitorLeadership is: one goroutine reads them; gaining
// leadership applies a barrier and then starts every task, each with the
// term's stop channel; losing it closes that channel and waits for every
// task to return before anything else is read. No other code reads the
// notifications or polls whether this server leads to decide to act.
type Leadership struct {
	log     hclog.Logger
	notify  <-chan bool
	barrier func(ctx context.Context) error

	mu      sync.Mutex
	tasks   []Task
	started bool
	cur     *term  // the term whose tasks run; nil while not leading
	terms   uint64 // terms whose tasks were started
	running int    // tasks of the current term still running

	stop chan struct{}
	done chan struct{}
}

// New makes the owner of the notifications on notify (raft's NotifyCh:
// true when this server becomes leader, false when it stops being one).
// barrier makes sure this server's replica has every entry of the terms
// before its own (raft.Barrier); it is retried until it succeeds or
// leadership is lost.
func New(log hclog.Logger, notify <-chan bool, barrier func(ctx context.Context) error) *Leadership {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Leadership{log: log, notify: notify, barrier: barrier, stop: make(chan struct{}), done: make(chan struct{})}
}

// Add registers a task for every term. Tasks start in the order they
// were added; one added while this server leads starts in the current
// term at once.
func (l *Leadership) Add(name string, run func(stop <-chan struct{})) {
	l.mu.Lock()
	defer l.mu.Unlock()
	task := Task{Name: name, Run: run}
	l.tasks = append(l.tasks, task)
	if l.cur != nil {
		l.launchLocked(l.cur, task)
	}
}

// Leading reports whether this server leads with its tasks started: the
// state the tasks run in, for work that runs always and decides only
// while leading.
func (l *Leadership) Leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur != nil
}

// Start begins reading the notifications. Notifications sent before Start
// wait in the channel's buffer.
func (l *Leadership) Start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return
	}
	l.started = true
	go l.monitor()
}

// Stop stops the running term's tasks, waits for them, and stops reading
// the notifications. Idempotent; safe before Start.
func (l *Leadership) Stop() {
	l.mu.Lock()
	started := l.started
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.mu.Unlock()
	if started {
		<-l.done
	}
}

// Terms is how many terms this server has led with its tasks started.
func (l *Leadership) Terms() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.terms
}

// Running is how many tasks of the current term are still running (0
// while this server does not lead).
func (l *Leadership) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running
}

// monitor is the one reader of the notifications.
func (l *Leadership) monitor() {
	defer close(l.done)
	var term *term
	end := func() {
		if term != nil {
			l.end(term)
			term = nil
		}
	}
	defer end()
	for {
		select {
		case <-l.stop:
			return
		case leads := <-l.notify:
			switch {
			case leads && term == nil:
				term = l.begin()
			case !leads && term != nil:
				l.log.Info("leadership lost: stopping the leader's tasks")
				end()
			}
		}
	}
}

// term is one span of leadership: its tasks and the channel that stops
// them.
type term struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

// begin starts a term: the barrier first (retried until it holds or the
// term ends), then every task.
func (l *Leadership) begin() *term {
	t := &term{stop: make(chan struct{})}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if !l.establish(t.stop) {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		select {
		case <-t.stop:
			return // lost meanwhile
		default:
		}
		l.cur = t
		l.terms++
		l.log.Info("leadership gained: starting the leader's tasks", "tasks", len(l.tasks))
		for _, task := range l.tasks {
			l.launchLocked(t, task)
		}
	}()
	return t
}

// launchLocked starts one task in term t; l.mu is held.
func (l *Leadership) launchLocked(t *term, task Task) {
	l.running++
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer func() {
			l.mu.Lock()
			l.running--
			l.mu.Unlock()
		}()
		task.Run(t.stop)
	}()
}

// end stops term t's tasks and waits for them.
func (l *Leadership) end(t *term) {
	l.mu.Lock()
	if l.cur == t {
		l.cur = nil
	}
	close(t.stop) // under mu: no task is launched in t from now on
	l.mu.Unlock()
	t.wg.Wait()
}

// establish applies the barrier, retrying with a growing pause, until it
// holds (true) or stop closes (false).
func (l *Leadership) establish(stop <-chan struct{}) bool {
	wait := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := l.barrier(ctx)
		cancel()
		if err == nil {
			return true
		}
		select {
		case <-stop:
			return false
		default:
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			l.log.Warn("applying the barrier of a new term; trying again", "error", err)
		}
		select {
		case <-stop:
			return false
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
