package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// keepEvery is how often the holder sends each idle page a pull. A
// benchkit.Page reads its WebSocket only during an op, so between ops it
// neither answers the front's pings nor sends anything, and the front drops
// a WebSocket it has heard nothing from for 50 s (twice its 20 s ping
// interval plus its 10 s write timeout, internal/front/ws.go). A browser
// answers pings by itself and its page keeps a pull outstanding; this pull,
// which also reads the pings waiting, stands in for both.
const keepEvery = 30 * time.Second

// runHolder is the holder's main function; it returns the exit code.
func runHolder(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("promote holder", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "the front's address")
	first := fs.Int("first", 0, "the first person's number")
	count := fs.Int("count", 0, "how many people")
	departed := fs.Int("departed", 0, "how many of them (the last) are detached once open")
	conc := fs.Int("concurrency", 32, "pages opened, sent an inc, kept and closed at once")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *addr == "" || *count < 1 || *departed < 0 || *departed > *count {
		fmt.Fprintln(stderr, "promote holder: -addr, a -count of at least 1 and a -departed of at most -count are needed")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := hold(ctx, *addr, *first, *count, *departed, max(*conc, 1), stdin, stdout, stderr)
	if errors.Is(err, errAborted) {
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "promote holder: %v\n", err)
		return 1
	}
	return 0
}

// held are the holder's pages, people first … first+len(pages)-1. The
// last departed of them are detached once open, after one inc: people who
// closed their laptop, whose page and person stay in their worker without
// a WebSocket (so that a run of 100,000 people needs no 100,000 files).
// Each of their checks reattaches, incs and detaches again.
type held struct {
	first    int
	departed int
	mu       []sync.Mutex // mu[i] guards pages[i]: one op at a time on a page
	pages    []*benchkit.Page
}

func (h *held) name(i int) string { return userName(h.first + i) }

// with calls f with page i, if it is open, holding its lock.
func (h *held) with(i int, f func(*benchkit.Page) error) error {
	h.mu[i].Lock()
	defer h.mu[i].Unlock()
	if h.pages[i] == nil {
		return nil
	}
	if err := f(h.pages[i]); err != nil {
		return fmt.Errorf("%s: %w", h.name(i), err)
	}
	return nil
}

// abort drops every open page.
func (h *held) abort() {
	for i := range h.pages {
		h.mu[i].Lock()
		if h.pages[i] != nil {
			h.pages[i].Abort()
			h.pages[i] = nil
		}
		h.mu[i].Unlock()
	}
}

// hold opens the pages and answers the benchmark's commands until "close",
// the end of stdin, or a failed op.
func hold(ctx context.Context, addr string, first, count, departed, conc int, stdin io.Reader, stdout, stderr io.Writer) error {
	if err := raiseFileLimit(count - departed + conc + fileMargin); err != nil {
		return err
	}
	h := &held{first: first, departed: departed, mu: make([]sync.Mutex, count), pages: make([]*benchkit.Page, count)}
	defer h.abort()
	// The keeper starts first: the pages opened first must not wait for
	// the last.
	k := startKeeper(h, conc)
	defer k.halt()

	began := time.Now()
	var opened atomic.Int64
	step := max(count/10, 100)
	err := benchkit.ForEach(count, conc, func(i int) error {
		p, err := benchkit.OpenPage(ctx, addr, h.name(i), opTimeout)
		if err != nil {
			return fmt.Errorf("opening %s's page: %w", h.name(i), err)
		}
		if i >= count-departed {
			if _, err := p.Inc(); err != nil {
				p.Abort()
				return fmt.Errorf("%s's first inc: %w", h.name(i), err)
			}
			p.Detach()
		}
		h.mu[i].Lock()
		h.pages[i] = p
		h.mu[i].Unlock()
		if n := int(opened.Add(1)); n%step == 0 || n == count {
			fmt.Fprintf(stderr, "  %d/%d idle pages open (%.1f s)\n", n, count, time.Since(began).Seconds())
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "ready")

	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
	}()
	for {
		var line string
		select {
		case l, ok := <-cmds:
			if !ok {
				return errAborted
			}
			line = l
		case <-k.failed:
			return k.err
		case <-ctx.Done():
			return fmt.Errorf("interrupted: %w", ctx.Err())
		}
		cmd, arg, _ := strings.Cut(line, " ")
		switch cmd {
		case "inc":
			want := map[string]bool{}
			for _, w := range strings.Split(arg, ",") {
				want[w] = true
			}
			err := benchkit.ForEach(count, conc, func(i int) error {
				return h.with(i, func(p *benchkit.Page) error {
					away := p.Detached()
					if away {
						if err := p.Reattach(ctx); err != nil {
							return fmt.Errorf("reattaching: %w", err)
						}
						defer p.Detach()
					}
					w, err := p.Inc()
					if err == nil && !want[w] {
						err = fmt.Errorf("inc answered by %s, want one of %s", w, arg)
					}
					return err
				})
			})
			if err != nil {
				return err
			}
		case "close":
			if err := k.halt(); err != nil {
				return err
			}
			err := benchkit.ForEach(count, conc, func(i int) error {
				return h.with(i, func(p *benchkit.Page) error {
					h.pages[i] = nil
					if p.Detached() {
						if err := p.Reattach(ctx); err != nil {
							return fmt.Errorf("reattaching to close: %w", err)
						}
					}
					return p.Close()
				})
			})
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, "ok")
			return nil
		default:
			return fmt.Errorf("unknown command %q", line)
		}
		fmt.Fprintln(stdout, "ok")
	}
}

// keeper sends each open page a pull (benchkit.Page.Ack) every keepEvery,
// the pages in turn, evenly spaced, conc at a time.
type keeper struct {
	stop   chan struct{}
	done   chan struct{} // closed when the keeper has stopped
	failed chan struct{} // closed on the first failed pull, err set before
	once   sync.Once
	err    error
}

func startKeeper(h *held, conc int) *keeper {
	k := &keeper{stop: make(chan struct{}), done: make(chan struct{}), failed: make(chan struct{})}
	go k.run(h, conc)
	return k
}

func (k *keeper) fail(err error) {
	k.once.Do(func() {
		k.err = err
		close(k.failed)
	})
}

func (k *keeper) run(h *held, conc int) {
	defer close(k.done)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				err := h.with(i, func(p *benchkit.Page) error {
					if p.Detached() {
						return nil
					}
					_, err := p.Ack()
					return err
				})
				if err != nil {
					k.fail(fmt.Errorf("keeping the page open: %w", err))
				}
			}
		}()
	}
	defer wg.Wait()
	defer close(jobs)
	attached := len(h.pages) - h.departed
	if attached == 0 {
		<-k.stop
		return
	}
	tick := time.NewTicker(keepEvery / time.Duration(attached))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % attached {
		select {
		case <-tick.C:
		case <-k.stop:
			return
		case <-k.failed:
			return
		}
		select {
		case jobs <- i:
		case <-k.stop:
			return
		case <-k.failed:
			return
		}
	}
}

// halt stops the keeper, waits for its pulls in flight and returns its
// error, if any. It may be called more than once.
func (k *keeper) halt() error {
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	<-k.done
	select {
	case <-k.failed:
		return k.err
	default:
		return nil
	}
}
