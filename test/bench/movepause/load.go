package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// failure is the run's first error. Any goroutine may report one; the
// measuring goroutine waits on done and stops. Reporting is idempotent.
type failure struct {
	once sync.Once
	err  error // set once, before done is closed
	done chan struct{}
}

func newFailure() *failure { return &failure{done: make(chan struct{})} }

// set records err unless an error was recorded already.
func (f *failure) set(err error) {
	f.once.Do(func() {
		f.err = err
		close(f.done)
	})
}

// check returns the recorded error, if any.
func (f *failure) check() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// load is the other people: each page is its own browser, anonymous, on
// whichever worker the front placed it, sending inc closed loop until
// stopped. They are never moved. A failed inc fails the run.
type load struct {
	pages  []*benchkit.Page
	frames atomic.Int64 // round trips completed
	stop   atomic.Bool
	wg     sync.WaitGroup
}

// startLoad opens n pages and starts them typing.
func startLoad(ctx context.Context, addr string, n int, fail *failure) (*load, error) {
	l := &load{}
	for i := 0; i < n; i++ {
		p, err := benchkit.OpenPage(ctx, addr, "", opTimeout)
		if err != nil {
			l.abort()
			return nil, fmt.Errorf("opening load page %d: %w", i, err)
		}
		l.pages = append(l.pages, p)
	}
	for i, p := range l.pages {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for !l.stop.Load() {
				if err := p.IncHome(); err != nil {
					if !l.stop.Load() {
						fail.set(fmt.Errorf("load page %d on %s: %w", i, p.Worker(), err))
					}
					return
				}
				l.frames.Add(1)
			}
		}()
	}
	return l, nil
}

// perWorker counts the load pages on each worker.
func (l *load) perWorker() map[string]int {
	m := map[string]int{}
	for _, p := range l.pages {
		m[p.Worker()]++
	}
	return m
}

// close stops the pages, waits for them and closes them on their workers.
func (l *load) close() error {
	l.stop.Store(true)
	l.wg.Wait()
	var first error
	for i, p := range l.pages {
		if err := p.Close(); err != nil && first == nil {
			first = fmt.Errorf("load page %d: %w", i, err)
		}
	}
	l.pages = nil
	return first
}

// abort stops the pages by dropping their WebSockets (unblocking their
// reads) and waits for them.
func (l *load) abort() {
	l.stop.Store(true)
	for _, p := range l.pages {
		p.Abort()
	}
	l.wg.Wait()
	l.pages = nil
}
