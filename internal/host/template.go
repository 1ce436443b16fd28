package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/plugins/worker/channel"
)

// TemplateLauncher starts a group's workers by fork from one template
// process (a Python group's template: `python3 -m stickyd.template`). The
// template imports the app and runs its build step once; each worker is a
// fork of it, which speaks go-plugin's handshake on a pipe the host hands
// over and opens its own channel, so no gRPC state crosses a fork. Workers
// do not depend on the template once forked: a template that dies is
// started (and built) again at the next launch, and its workers go on.
type TemplateLauncher struct {
	// Command and Args start the template; it is told the socket to
	// listen on in STICKYD_TEMPLATE_SOCKET and with --socket.
	Command string
	Args    []string
	// Env is added to the agent's environment, for the template and for
	// each worker.
	Env []string
	// Dir holds the template's socket (created 0700); "" makes one under
	// the system's temporary directory.
	Dir string
	// BuildTimeout bounds the template's build (default 10 minutes).
	BuildTimeout time.Duration
	PlainChannel bool
	Logger       hclog.Logger

	// closing is set by Close before it stops the template: its end is
	// then no news.
	closing atomic.Bool

	// build makes the builds take turns (held for one's length).
	build sync.Mutex

	mu     sync.Mutex // guards the fields below, never held for long
	tmpl   *templateProc
	builds int
	closed bool
	ownDir bool // Dir was made here: Close removes it
}

var _ Launcher = (*TemplateLauncher)(nil)

// templateProc is one run of the template process.
type templateProc struct {
	cmd    *exec.Cmd
	socket string
	done   chan struct{} // closed when it exited
}

func (t *templateProc) alive() bool {
	select {
	case <-t.done:
		return false
	default:
		return true
	}
}

// TemplateInfo is what the monitor shows of a group's template.
type TemplateInfo struct {
	Pid int `json:"pid"`
	// Builds counts the template's starts: more than one means it died
	// and was built again.
	Builds int `json:"builds"`
}

// Info says how the template is (Pid 0: not running).
func (l *TemplateLauncher) Info() TemplateInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	info := TemplateInfo{Builds: l.builds}
	if l.tmpl != nil && l.tmpl.alive() {
		info.Pid = l.tmpl.cmd.Process.Pid
	}
	return info
}

// Close stops the template (its workers stay, until the pool stops them).
func (l *TemplateLauncher) Close() error {
	l.closing.Store(true)
	l.mu.Lock()
	l.closed = true
	t, dir := l.tmpl, ""
	if l.ownDir {
		dir = l.Dir
	}
	l.mu.Unlock()
	if t != nil && t.alive() {
		_ = t.cmd.Process.Kill()
		<-t.done
	}
	// A build in progress sees the process end and gives up.
	l.build.Lock()
	defer l.build.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	return nil
}

// template returns the running template, starting it (and waiting for its
// build) if it is not. Builds take turns (build); the fields the monitor
// reads (mu) are never held during one.
func (l *TemplateLauncher) template(ctx context.Context) (*templateProc, error) {
	l.build.Lock()
	defer l.build.Unlock()
	l.mu.Lock()
	closed, running := l.closed, l.tmpl
	l.mu.Unlock()
	if closed {
		return nil, errors.New("the group's template is closed")
	}
	if running != nil && running.alive() {
		return running, nil
	}
	if l.Dir == "" {
		// A socket's path is short (108 bytes): a directory of its own
		// under the system's temporary directory, gone with Close.
		dir, err := os.MkdirTemp("", "stickyd-template-")
		if err != nil {
			return nil, fmt.Errorf("template directory: %w", err)
		}
		l.mu.Lock()
		l.Dir, l.ownDir = dir, true
		l.mu.Unlock()
	}
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("template directory: %w", err)
	}
	socket := filepath.Join(l.Dir, "template.sock")
	cmd := exec.Command(l.Command, append(append([]string(nil), l.Args...), "--socket", socket)...)
	cmd.Env = append(cmd.Environ(), l.Env...)
	cmd.Env = append(cmd.Env, "STICKYD_TEMPLATE_SOCKET="+socket, channel.Handshake.MagicCookieKey+"="+channel.Handshake.MagicCookieValue)
	if !l.PlainChannel {
		// The template keeps a fork ready for AutoMTLS (its key made, its
		// server listening): the next start is then only its handshake.
		cmd.Env = append(cmd.Env, "STICKYD_TEMPLATE_SPARE=tls")
	}
	setDeathSignal(cmd)
	log := l.logger().Named("template")
	stderr := newAppOutput(log, "stderr", true)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the template %q: %w", l.Command, err)
	}
	t := &templateProc{cmd: cmd, socket: socket, done: make(chan struct{})}
	l.mu.Lock()
	l.builds++
	l.tmpl = t // Close stops it even while it builds
	l.mu.Unlock()
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("the template said %q, not ready", strings.TrimSpace(line))
		}
		ready <- err
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		err := cmd.Wait()
		if l.closing.Load() {
			log.Debug("the group's template stopped", "pid", cmd.Process.Pid)
		} else {
			log.Warn("the group's template ended; the next worker's start builds it again", "pid", cmd.Process.Pid, "status", err)
		}
		close(t.done)
	}()
	bound := l.BuildTimeout
	if bound <= 0 {
		bound = 10 * time.Minute
	}
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case err = <-ready:
	case <-timer.C:
		err = fmt.Errorf("the template did not build within %v", bound)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		_ = cmd.Process.Kill()
		<-t.done
		stderr.Flush()
		if tail := stderr.Tail(); len(tail) > 0 {
			for i, line := range tail {
				tail[i] = readableLine(line)
			}
			return nil, fmt.Errorf("building the group's template: %w; it said:\n  %s", err, strings.Join(tail, "\n  "))
		}
		return nil, fmt.Errorf("building the group's template: %w", err)
	}
	log.Info("the group's template is built", "pid", cmd.Process.Pid, "took", time.Since(began).Round(time.Millisecond))
	return t, nil
}

func (l *TemplateLauncher) logger() hclog.Logger {
	if l.Logger == nil {
		return hclog.NewNullLogger()
	}
	return l.Logger
}

// Launch forks a worker from the template (built first if need be) and
// opens its channel.
func (l *TemplateLauncher) Launch(ctx context.Context, id string) (Process, channel.Conn, error) {
	t, err := l.template(ctx)
	if err != nil {
		return nil, nil, err
	}
	env := append(append([]string(nil), l.Env...), "STICKYD_WORKER_ID="+id, "STICKYD_HOST_PID="+strconv.Itoa(os.Getpid()))
	return l.fork(ctx, id, t, env)
}
