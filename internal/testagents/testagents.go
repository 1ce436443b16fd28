// Package testagents starts real Consul and Nomad dev agents for tests.
//
// It owns finding the agent binaries that `make tools` builds into bin/,
// running one agent per test on ports the OS picked, waiting until the agent
// is usable, and stopping it (and everything it started) when the test ends.
// It is imported only by tests; it must never be imported by stickyd itself,
// and it never touches an agent it did not start (no fixed ports, no
// 127.0.0.1:8500).
package testagents

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/freeport"
)

// modulePath is the module whose root holds bin/.
const modulePath = "github.com/stickyd/stickyd"

// Bounds on waiting for agents. They are generous because the race
// detector and a busy CI machine slow everything down.
const (
	startTimeout = 90 * time.Second
	stopTimeout  = 15 * time.Second
	startTries   = 3
	logTailLines = 60
)

// Sentinel errors.
var (
	// ErrNoBinary is returned by Binary when the agent binary is not built.
	ErrNoBinary = errors.New("agent binary not found")
)

// nodeSeq makes node names unique within one test binary; the pid makes
// them unique across test binaries running at the same time.
var nodeSeq atomic.Uint64

func uniqueName(kind string) string {
	return fmt.Sprintf("%s-%d-%d", kind, os.Getpid(), nodeSeq.Add(1))
}

// Binary returns the path of the agent binary name ("consul" or "nomad"):
// $STICKYD_<NAME>_BIN when set, otherwise bin/<name> in the root of the
// stickyd module, found by walking up from the working directory to the
// go.mod of module github.com/stickyd/stickyd. It returns an error wrapping
// ErrNoBinary when there is no such executable file.
func Binary(name string) (string, error) {
	env := "STICKYD_" + strings.ToUpper(name) + "_BIN"
	if p := os.Getenv(env); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("checking $%s: %w", env, err)
		}
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("finding %s: %w", name, err)
	}
	p := filepath.Join(root, "bin", name)
	if err := checkExecutable(p); err != nil {
		return "", fmt.Errorf("finding %s: %w", name, err)
	}
	return p, nil
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNoBinary, p)
		}
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%w: %s is not an executable file", ErrNoBinary, p)
	}
	return nil
}

// moduleRoot walks up from the working directory to the directory whose
// go.mod declares modulePath.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isModuleRoot(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no go.mod of module %s above the working directory", ErrNoBinary, modulePath)
		}
		dir = parent
	}
}

func isModuleRoot(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == modulePath
		}
	}
	return false
}

// Require returns the path of the agent binary name. When it is missing the
// test is skipped, or fails when STICKYD_REQUIRE_AGENTS=1 (CI sets it so a
// missing build cannot pass silently).
func Require(t testing.TB, name string) string {
	t.Helper()
	p, err := Binary(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s agent not available (%v); run make tools", name, err)
	if os.Getenv("STICKYD_REQUIRE_AGENTS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// freePorts returns n distinct ports free for TCP and UDP on 127.0.0.1
// (Consul's DNS and both agents' serf use UDP on the same number), from
// ports no other test binary is handed. The start loops still retry if a
// port is taken before the agent binds it.
func freePorts(n int) ([]int, error) { return freeport.Take(n) }

// closedAddr returns a 127.0.0.1 address nothing listens on, for agents
// that must be pointed somewhere harmless.
func closedAddr() (string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), nil
}

// process is one running agent: its command, its log file and a channel
// closed when it has exited.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error // set before done is closed
}

// startProcess runs bin args with stdout and stderr appended to logPath.
// The agent gets its own process group so a stray signal to the test's
// group does not reach it and stop() can signal its whole group.
func startProcess(name, bin string, args []string, dir, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGINT, then SIGKILL to the agent's process group when it has
// not exited within stopTimeout, and waits for it. It is idempotent.
func (p *process) stop(t testing.TB) {
	t.Helper()
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		return
	case <-time.After(stopTimeout):
	}
	t.Logf("testagents: %s did not exit %s after SIGINT; killing it", p.name, stopTimeout)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		t.Errorf("testagents: %s (pid %d) still running after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// logTail returns the last n lines of the agent's log.
func (p *process) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.logPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// addrInUse reports whether the agent's log says a port was taken, which
// is worth a retry on fresh ports.
func (p *process) addrInUse() bool {
	b, _ := os.ReadFile(p.logPath)
	return bytes.Contains(b, []byte("address already in use"))
}

// logTailOnFailure prints the agent's log tail when the test failed.
func logTailOnFailure(t testing.TB, p *process) {
	t.Helper()
	if t.Failed() {
		t.Logf("testagents: last %d lines of the %s log (%s):\n%s", logTailLines, p.name, p.logPath, p.logTail(logTailLines))
	}
}

// waitFor polls cond until it returns nil, the process exits, or timeout.
// It returns the last error from cond on timeout.
func waitFor(p *process, timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	delay := 50 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited (%v); last check: %w", p.name, p.waitErr, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w", p.name, timeout, err)
		}
		time.Sleep(delay)
		if delay < 500*time.Millisecond {
			delay *= 2
		}
	}
}

// killUnder SIGKILLs every process whose working directory or command line
// lies under dir, except the caller. It is the last line of defence against
// task and executor processes an agent left behind (a Nomad executor
// outlives its agent by design). It returns the pids it killed. Linux only;
// elsewhere it finds nothing.
func killUnder(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var killed []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if !underDir(pid, dir) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, pid)
		}
	}
	return killed
}

func underDir(pid int, dir string) bool {
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	if cwd, err := os.Readlink(filepath.Join(proc, "cwd")); err == nil {
		if cwd == dir || strings.HasPrefix(cwd, dir+string(filepath.Separator)) {
			return true
		}
	}
	cmdline, err := os.ReadFile(filepath.Join(proc, "cmdline"))
	if err != nil {
		return false
	}
	return bytes.Contains(cmdline, []byte(dir+string(filepath.Separator)))
}

// unmountUnder detaches every mount point under dir (the secrets and
// private directories a Nomad client running as root mounts into each
// allocation, which it leaves behind when it stops), deepest first, so
// that the test's temporary directory can be removed.
func unmountUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		// Mount points with spaces are escaped as \040; none of Nomad's.
		if p := f[1]; strings.HasPrefix(p, dir+string(filepath.Separator)) {
			points = append(points, p)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	var done []string
	for _, p := range points {
		if syscall.Unmount(p, syscall.MNT_DETACH) == nil {
			done = append(done, p)
		}
	}
	return done
}
