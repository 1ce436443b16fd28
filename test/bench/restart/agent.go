package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/freeport"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// agentEnv, set to "1" in this program's environment, makes it a real
// `stickyd agent` process: main hands its arguments to the command line.
const agentEnv = "STICKYD_BENCH_AGENT"

const (
	// adminToken is the agent's admin token (the admin API is configured
	// as a production agent's would be; the benchmark reads the front only).
	adminToken = "bench-token"
	// slowBound is the agent's frame timeout, barrier wait and freeze
	// timeout: raised from their defaults so that a slow machine reports a
	// long time instead of refusing a request.
	slowBound = "60s"
	// startLimit bounds a start, from the exec to the front serving.
	startLimit = 2 * time.Minute
	// stopLimit bounds a stop. The agent gives its own shutdown 15 s; past
	// stopLimit it is killed and the run fails.
	stopLimit = 2 * time.Minute
	// pollEvery is how often a start is polled.
	pollEvery = 5 * time.Millisecond
	// tailLines is how much of the agent's output a failure shows.
	tailLines = 40
)

// Lines of the agent's log (internal/agent) whose arrival times split a
// stop or a start into its parts. A line that changed its wording is only
// shown as "?" in the report.
const (
	markParking  = "parking everyone before stopping"
	markParked   = "parked everyone"
	markFollower = "entering follower state" // hashicorp/raft: log and snapshot opened
	markLeader   = "entering leader state"   // hashicorp/raft: elected
	markMaps     = ": restart: "             // the maps applied and every parked package checked
	markFront    = "front listening"
)

var marks = []string{markParking, markParked, markFollower, markLeader, markMaps, markFront}

// agentProc is a real `stickyd agent` process (this binary, re-executed)
// with its configuration and data in dir. It is started and stopped from
// one goroutine.
type agentProc struct {
	dir    string
	config string // the HCL file
	front  string // the front's address, the same across restarts
	level  hclog.Level
	stderr io.Writer
	health *http.Client

	cmd     *exec.Cmd
	log     *agentLog
	done    chan struct{} // closed once the process has exited
	exitErr error         // set before done is closed
}

// newAgentProc writes the configuration of an agent whose one group runs
// the counter app on workers subprocess workers, on free loopback ports
// that it keeps across restarts. level says what of the agent's log is
// copied to stderr.
func newAgentProc(dir string, workers int, level hclog.Level, stderr io.Writer) (*agentProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to run it as the agent: %w", err)
	}
	ports := make([]string, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	p := &agentProc{dir: dir, config: filepath.Join(dir, "stickyd.hcl"), front: ports[0], level: level, stderr: stderr,
		health: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}}
	// log_level is info whatever -log says: the stop and the start are
	// split by the arrival of info lines.
	cfg := fmt.Sprintf(`name      = "bench"
data_dir  = %q
log_level = "info"
server {
  raft_addr = %q
}
front {
  address       = %q
  frame_timeout = %q
  barrier_wait  = %q
}
admin {
  address = %q
  token   = %q
}
move {
  freeze_timeout = %q
}
group "web" {
  workers = %d
  plugin {
    command = %q
    env     = { %s = "counter" }
  }
}
`, filepath.Join(dir, "data"), ports[1], p.front, slowBound, slowBound, ports[2], adminToken, slowBound, workers, exe, benchkit.WorkerEnv)
	if err := os.WriteFile(p.config, []byte(cfg), 0o600); err != nil {
		return nil, fmt.Errorf("writing the agent's configuration: %w", err)
	}
	return p, nil
}

// freePort is a loopback address for the agent to listen on.
func freePort() (string, error) {
	ps, err := freeport.Take(1)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", ps[0]), nil
}

func (p *agentProc) parkDir() string { return filepath.Join(p.dir, "data", "park") }
func (p *agentProc) raftDir() string { return filepath.Join(p.dir, "data", "raft") }

// launch executes the agent and returns when it did.
func (p *agentProc) launch() (time.Time, error) {
	exe, err := os.Executable()
	if err != nil {
		return time.Time{}, err
	}
	p.health.CloseIdleConnections()
	p.log = newAgentLog(p.level, p.stderr)
	cmd := exec.Command(exe, "agent", "-config", p.config)
	cmd.Env = append(os.Environ(), agentEnv+"=1")
	cmd.Stdout, cmd.Stderr = p.log, p.log
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return t0, fmt.Errorf("executing the agent: %w", err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		p.exitErr = cmd.Wait()
		close(p.done)
	}()
	return t0, nil
}

// start executes the agent and waits until its front answers its health
// check, returning how long that took from the exec.
func (p *agentProc) start(ctx context.Context) (time.Duration, error) {
	t0, err := p.launch()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, startLimit)
	defer cancel()
	at, err := p.waitHealthy(ctx)
	if err != nil {
		return 0, err
	}
	return at.Sub(t0), nil
}

// restartTimes splits a start, each from the exec.
type restartTimes struct {
	raftOpen time.Duration // markFollower logged; -1 if never
	leader   time.Duration // markLeader logged; -1 if never
	mapsBack time.Duration // markMaps logged; -1 if never
	frontUp  time.Duration // markFront logged; -1 if never
	health   time.Duration // the first health check answered 200
	probe    time.Duration // probe returned
}

// restart executes the agent again and, from that moment, polls its health
// check and runs probe side by side; probe must retry until the front
// listens. It returns once both succeeded.
func (p *agentProc) restart(ctx context.Context, probe func(context.Context) error) (restartTimes, error) {
	rt := restartTimes{}
	t0, err := p.launch()
	if err != nil {
		return rt, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, startLimit, errors.New("the start took too long"))
	defer cancel()
	// The process's exit ends the probe's retries too.
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	var (
		wg      sync.WaitGroup
		probeAt time.Time
		probeEr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		probeEr = probe(ctx)
		probeAt = time.Now()
	}()
	healthAt, herr := p.waitHealthy(ctx)
	wg.Wait()
	if herr != nil {
		return rt, herr
	}
	if probeEr != nil {
		return rt, fmt.Errorf("serving the first parked person: %w%s", probeEr, p.exitNote())
	}
	rt.health, rt.probe = healthAt.Sub(t0), probeAt.Sub(t0)
	rt.raftOpen, rt.leader = p.log.since(markFollower, t0), p.log.since(markLeader, t0)
	rt.mapsBack, rt.frontUp = p.log.since(markMaps, t0), p.log.since(markFront, t0)
	return rt, nil
}

// waitHealthy polls the front's health check until it answers 200.
func (p *agentProc) waitHealthy(ctx context.Context) (time.Time, error) {
	for {
		select {
		case <-p.done:
			return time.Time{}, fmt.Errorf("the agent exited while starting: %v; its last lines:\n%s", p.exitErr, p.log.tail())
		default:
		}
		if resp, err := p.health.Get("http://" + p.front + "/_stickyd/health"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		select {
		case <-time.After(pollEvery):
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for the front to answer its health check: %w; the agent's last lines:\n%s",
				context.Cause(ctx), p.log.tail())
		}
	}
}

// exitNote says how the agent exited, if it did.
func (p *agentProc) exitNote() string {
	select {
	case <-p.done:
		return fmt.Sprintf(" (the agent exited: %v; its last lines:\n%s)", p.exitErr, p.log.tail())
	default:
		return ""
	}
}

// restartReport is the restart part of the front's health check (see
// agent.RestartReport).
type restartReport struct {
	Folder       string   `json:"folder"`
	Parked       int      `json:"parked"`
	Missing      int      `json:"missing"`
	Incomplete   []string `json:"incomplete"`
	AbortedMoves []string `json:"aborted_moves"`
}

// restartReport reads what the agent found of its last stop.
func (p *agentProc) restartReport(ctx context.Context) (restartReport, error) {
	var h struct {
		Restart restartReport `json:"restart"`
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.front+"/_stickyd/health", nil)
	if err != nil {
		return h.Restart, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken) // the details are the token's
	resp, err := p.health.Do(req)
	if err != nil {
		return h.Restart, fmt.Errorf("reading the restart report: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return h.Restart, fmt.Errorf("reading the restart report: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return h.Restart, fmt.Errorf("decoding the restart report: %w", err)
	}
	return h.Restart, nil
}

// stopTimes splits a stop, each from the SIGTERM.
type stopTimes struct {
	total     time.Duration // the process exited
	parkBegin time.Duration // markParking logged; -1 if never
	parkEnd   time.Duration // markParked logged; -1 if never
}

// stop sends SIGTERM and waits for the process to exit. Anything but a
// clean exit within stopLimit is an error.
func (p *agentProc) stop(ctx context.Context) (stopTimes, error) {
	t0 := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return stopTimes{}, fmt.Errorf("sending SIGTERM: %w", err)
	}
	timer := time.NewTimer(stopLimit)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.kill()
		return stopTimes{}, fmt.Errorf("the agent did not exit within %v of SIGTERM; its last lines:\n%s", stopLimit, p.log.tail())
	case <-ctx.Done():
		p.kill()
		return stopTimes{}, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	st := stopTimes{total: time.Since(t0), parkBegin: p.log.since(markParking, t0), parkEnd: p.log.since(markParked, t0)}
	if p.exitErr != nil {
		parked := "it never logged that parking ended"
		if st.parkEnd >= 0 {
			parked = fmt.Sprintf("%v after SIGTERM it logged %q", st.parkEnd.Round(time.Millisecond), p.log.line(markParked))
		}
		return st, fmt.Errorf("the agent exited with %v %v after SIGTERM; %s; its last lines:\n%s",
			p.exitErr, st.total.Round(time.Millisecond), parked, p.log.tail())
	}
	return st, nil
}

// kill kills the process if it is still running and waits for it. Its
// workers die with it (the host asks the kernel for that on Linux).
func (p *agentProc) kill() {
	if p.cmd == nil {
		return
	}
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// dirSize counts the regular files under dir (a missing dir is empty) and
// their bytes, leaving out temporary files.
func dirSize(dir string) (files int, size int64, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".tmp") {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files++
		size += info.Size()
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("measuring %s: %w", dir, err)
	}
	return files, size, nil
}

// agentLog takes the agent's output (stdout and stderr, one pipe): it notes
// when each of marks first arrives, keeps the last lines for error
// messages, and copies the lines at or above a level to stderr.
type agentLog struct {
	echo   hclog.Level
	stderr io.Writer

	mu      sync.Mutex           // guards all below
	partial []byte               // a line not ended yet
	last    []string             // the last tailLines lines
	seen    map[string]time.Time // when each mark first arrived
	lines   map[string]string    // the line that carried it
}

func newAgentLog(echo hclog.Level, stderr io.Writer) *agentLog {
	return &agentLog{echo: echo, stderr: stderr, seen: map[string]time.Time{}, lines: map[string]string{}}
}

// Write implements io.Writer; exec copies the process's output to it.
func (l *agentLog) Write(b []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lineLocked(now, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	return len(b), nil
}

func (l *agentLog) lineLocked(now time.Time, s string) {
	if len(l.last) == tailLines {
		copy(l.last, l.last[1:])
		l.last = l.last[:tailLines-1]
	}
	l.last = append(l.last, s)
	for _, m := range marks {
		if _, ok := l.seen[m]; !ok && strings.Contains(s, m) {
			l.seen[m], l.lines[m] = now, s
		}
	}
	if levelOf(s) >= l.echo {
		fmt.Fprintln(l.stderr, "agent| "+s)
	}
}

// levelOf is the level of an hclog line; a line without one (the command
// line's own output) counts as info.
func levelOf(s string) hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if strings.Contains(s, "["+strings.ToUpper(lv.String())+"]") {
			return lv
		}
	}
	return hclog.Info
}

// since is how long after t0 mark first arrived, or -1 if it never did (or
// only before t0).
func (l *agentLog) since(mark string, t0 time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.seen[mark]
	if !ok || at.Before(t0) {
		return -1
	}
	return at.Sub(t0)
}

// line is the line that carried mark, without its timestamp; "" if none did.
func (l *agentLog) line(mark string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.lines[mark]
	if _, rest, ok := strings.Cut(s, "] "); ok {
		s = strings.TrimSpace(rest)
	}
	return s
}

// tail is the agent's last lines, indented.
func (l *agentLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := append([]string(nil), l.last...)
	if len(l.partial) > 0 {
		lines = append(lines, string(l.partial))
	}
	if len(lines) == 0 {
		return "    (no output)"
	}
	return "    " + strings.Join(lines, "\n    ")
}
