//go:build linux

package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"golang.org/x/sys/unix"

	"github.com/stickyd/stickyd/plugins/worker/channel"
)

// fork has the template fork a worker for id and opens its channel.
func (l *TemplateLauncher) fork(ctx context.Context, id string, t *templateProc, env []string) (Process, channel.Conn, error) {
	var fr *forkRunner
	set := func(c *plugin.ClientConfig) {
		c.RunnerFunc = func(_ hclog.Logger, cmd *exec.Cmd, _ string) (runner.Runner, error) {
			fr = &forkRunner{tmpl: t, env: append(cmd.Env, env...), pidfd: -1}
			return fr, nil
		}
	}
	p, conn, err := launchPlugin(ctx, id, "template fork", l.PlainChannel, l.Logger, set, nil)
	if err != nil {
		return nil, nil, err
	}
	if pp, ok := p.(*pluginProcess); ok && pp.pid == 0 && fr != nil {
		pp.pid = fr.pid
	}
	return p, conn, nil
}

// forkRunner is go-plugin's runner for a worker forked from a template: it
// asks the template for the fork, hands it the pipes of its stdout and
// stderr, and watches it by pid (it is the template's child, not ours).
type forkRunner struct {
	tmpl *templateProc
	env  []string

	pid            int
	stdout, stderr *os.File
	mu             sync.Mutex // guards pidfd and ended
	pidfd          int        // -1: none (an old kernel), or closed once the worker ended
	ended          bool
}

var _ runner.Runner = (*forkRunner)(nil)

// forkTimeout bounds the fork request (the template answers at once).
const forkTimeout = 10 * time.Second

func (r *forkRunner) Start(ctx context.Context) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	// Our copies of the write ends go once the template has its own.
	defer outW.Close()
	defer errW.Close()
	d := net.Dialer{Timeout: forkTimeout}
	c, err := d.DialContext(ctx, "unix", r.tmpl.socket)
	if err != nil {
		outR.Close()
		errR.Close()
		return fmt.Errorf("asking the template for a worker: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(forkTimeout))
	env := map[string]string{}
	for _, kv := range r.env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	req, err := json.Marshal(map[string]any{"env": env})
	if err != nil {
		return err
	}
	uc := c.(*net.UnixConn)
	if _, _, err := uc.WriteMsgUnix(req, unix.UnixRights(int(outW.Fd()), int(errW.Fd())), nil); err != nil {
		outR.Close()
		errR.Close()
		return fmt.Errorf("asking the template for a worker: %w", err)
	}
	var ans struct {
		Pid   int    `json:"pid"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(uc).Decode(&ans); err != nil || ans.Pid <= 0 {
		outR.Close()
		errR.Close()
		if err == nil {
			err = errors.New(ans.Error)
		}
		return fmt.Errorf("the template did not fork a worker: %w", err)
	}
	r.pid, r.stdout, r.stderr = ans.Pid, outR, errR
	if fd, err := unix.PidfdOpen(ans.Pid, 0); err == nil {
		r.mu.Lock()
		r.pidfd = fd
		r.mu.Unlock()
	}
	return nil
}

func (r *forkRunner) Diagnose(context.Context) string { return "" }
func (r *forkRunner) Stdout() io.ReadCloser           { return r.stdout }
func (r *forkRunner) Stderr() io.ReadCloser           { return r.stderr }
func (r *forkRunner) Name() string                    { return "template fork" }
func (r *forkRunner) ID() string                      { return strconv.Itoa(r.pid) }

// Wait waits for the worker to end (its pidfd turns readable; without
// one, its pid is gone), then lets the pidfd go.
func (r *forkRunner) Wait(ctx context.Context) error {
	r.mu.Lock()
	fd := r.pidfd
	r.mu.Unlock()
	for {
		if fd >= 0 {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if n, err := unix.Poll(fds, 200); err == nil && n > 0 {
				break
			}
		} else if unix.Kill(r.pid, 0) != nil {
			break
		} else {
			time.Sleep(200 * time.Millisecond)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	r.mu.Lock()
	if r.pidfd >= 0 {
		unix.Close(r.pidfd)
		r.pidfd = -1
	}
	r.ended = true
	r.mu.Unlock()
	return nil
}

// Kill ends the worker (by its pidfd while it has one: a pid the kernel
// gave to another process since is never signalled).
func (r *forkRunner) Kill(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	switch {
	case r.ended || r.pid == 0:
		return nil
	case r.pidfd >= 0:
		err = unix.PidfdSendSignal(r.pidfd, unix.SIGKILL, nil, 0)
	default:
		err = unix.Kill(r.pid, unix.SIGKILL)
	}
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

func (r *forkRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *forkRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
