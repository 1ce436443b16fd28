package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The holder is this binary re-executed with holderEnv=1: it holds the idle
// people's pages, so that their client ends of the WebSockets are not in the
// agent's process (each end is an open file; the agent's side of every
// WebSocket is already one per person).
//
// It speaks one line at a time on its stdin and stdout:
//
//	holder → "ready"        every page is open
//	"inc W1,W2,…" → "ok"    every page sent one inc, each answered, with
//	                        its count one higher, by one of the workers
//	"close" → "ok"          every page is closed; the holder exits 0
//
// Meanwhile it keeps every page open as a browser would (see keepEvery).
// Any error ends the holder with the message on its stderr (shared with
// the benchmark's) and exit code 1, its pages dropped; so does the end of
// its stdin before "close".
const holderEnv = "STICKYD_BENCH_PROMOTE_HOLDER"

const (
	// fileMargin is the open files a process needs besides one per
	// WebSocket end: the agent's listeners, raft, the workers' pipes, the
	// HTTP connections of the pages being opened.
	fileMargin = 1000
	// holderLimit bounds each exchange with the holder; its own ops time
	// out long before (opTimeout), so it is only a guard against a wedge.
	holderLimit = 30 * time.Minute
)

// errAborted ends a holder whose stdin ended before "close": the benchmark
// failed and is dropping everything, and has said why.
var errAborted = errors.New("the benchmark ended without closing the pages")

// holder is the benchmark's end of a holder process.
type holder struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string   // the holder's stdout lines; closed once it has exited
	exited chan struct{} // closed once it has exited, after err is set
	err    error         // the holder's exit
}

// startHolder starts a holder that opens the pages of people first …
// first+count-1 on the front at addr, conc at a time, and waits until they
// are all open.
// The last departed of them are detached once open (see held.departed).
func startHolder(ctx context.Context, addr string, first, count, departed, conc int, stderr io.Writer) (*holder, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to run it as the holder: %w", err)
	}
	cmd := exec.Command(exe, "-addr", addr, "-first", strconv.Itoa(first),
		"-count", strconv.Itoa(count), "-departed", strconv.Itoa(departed), "-concurrency", strconv.Itoa(conc))
	cmd.Env = append(os.Environ(), holderEnv+"=1")
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the holder: %w", err)
	}
	h := &holder{cmd: cmd, in: in, lines: make(chan string, 16), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		// Wait closes out: only once every line has been read.
		h.err = cmd.Wait()
		close(h.exited)
		close(h.lines)
	}()
	if err := h.expect(ctx, "ready"); err != nil {
		h.abort()
		return nil, fmt.Errorf("opening the idle pages: %w", err)
	}
	return h, nil
}

// expect waits for the holder's next line, which must be want.
func (h *holder) expect(ctx context.Context, want string) error {
	timer := time.NewTimer(holderLimit)
	defer timer.Stop()
	select {
	case l, ok := <-h.lines:
		if !ok {
			return fmt.Errorf("the holder ended (%v); its error is above", h.err)
		}
		if l != want {
			return fmt.Errorf("the holder said %q, want %q", l, want)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("interrupted: %w", ctx.Err())
	case <-timer.C:
		return fmt.Errorf("the holder said nothing for %v", holderLimit)
	}
}

// command sends the holder one command and waits for its "ok".
func (h *holder) command(ctx context.Context, line string) error {
	if _, err := io.WriteString(h.in, line+"\n"); err != nil {
		return fmt.Errorf("writing to the holder: %w", err)
	}
	return h.expect(ctx, "ok")
}

// incAll has every idle page send one inc, which one of workers must
// answer.
func (h *holder) incAll(ctx context.Context, workers []string) error {
	if err := h.command(ctx, "inc "+strings.Join(workers, ",")); err != nil {
		return fmt.Errorf("checking the idle pages: %w", err)
	}
	return nil
}

// close closes every idle page and waits for the holder to exit.
func (h *holder) close(ctx context.Context) error {
	if err := h.command(ctx, "close"); err != nil {
		h.abort()
		return fmt.Errorf("closing the idle pages: %w", err)
	}
	h.in.Close()
	for range h.lines {
	}
	if h.err != nil {
		return fmt.Errorf("the holder ended: %w", h.err)
	}
	return nil
}

// abort ends the holder's stdin, which drops its pages and ends it; if it
// has not exited after a while, it is killed. It waits for the exit.
func (h *holder) abort() {
	h.in.Close()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-h.lines:
			if !ok {
				return
			}
		case <-timer.C:
			_ = h.cmd.Process.Kill()
		}
	}
}
