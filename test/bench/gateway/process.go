package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one of the benchmark's child processes: the provider, a
// stickyd server or Portkey.
type process struct {
	cmd  *exec.Cmd
	addr string // what it serves on
	pid  int
	done chan struct{} // closed when it has exited
}

func newProcess(cmd *exec.Cmd, addr string) *process {
	p := &process{cmd: cmd, addr: addr, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to 30 seconds before it kills; it may
// be called again.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// spawn runs this program as one of the benchmark's processes (role, see
// serveRole), with env added to its environment, and returns once it has
// printed the address it serves on.
func spawn(role string, stderr io.Writer, env ...string) (*process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the %s process: %w", role, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("the %s process did not start: %w", role, err)
	}
	return newProcess(cmd, strings.TrimSpace(line)), nil
}

// clockTick is the unit of /proc's CPU times: USER_HZ, 100 on every Linux
// this runs on (sysconf would need cgo).
const clockTick = 10 * time.Millisecond

// cpuTimes are a set of processes' CPU times.
type cpuTimes struct{ user, sys time.Duration }

func (c cpuTimes) total() time.Duration { return c.user + c.sys }

func (c cpuTimes) sub(o cpuTimes) cpuTimes { return cpuTimes{c.user - o.user, c.sys - o.sys} }

// cpuTime is the user and system CPU time the processes pids have used
// since they started (utime and stime of /proc/PID/stat: every thread's,
// those that ended too), at clockTick's resolution.
func cpuTime(pids []int) (cpuTimes, error) {
	var total cpuTimes
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return cpuTimes{}, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
		}
		// The command's name, in parentheses, may hold spaces: the
		// fields are counted after its closing one, from the third
		// (state); utime and stime are the 14th and 15th.
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if i < 0 || len(f) < 13 {
			return cpuTimes{}, fmt.Errorf("reading the CPU time of process %d: %q", pid, b)
		}
		var utime, stime int64
		if _, err := fmt.Sscan(f[11]+" "+f[12], &utime, &stime); err != nil {
			return cpuTimes{}, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
		}
		total.user += time.Duration(utime) * clockTick
		total.sys += time.Duration(stime) * clockTick
	}
	return total, nil
}

// machineBusy is the CPU time the machine's processes have spent, user
// and system (/proc/stat; interrupts, which the kernel may or may not
// charge to the process they interrupted, left out), at clockTick's
// resolution.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var user, nice, system int64
	if len(f) < 4 || f[0] != "cpu" {
		return 0, fmt.Errorf("reading /proc/stat: %q", line)
	}
	if _, err := fmt.Sscan(f[1]+" "+f[2]+" "+f[3], &user, &nice, &system); err != nil {
		return 0, fmt.Errorf("reading /proc/stat: %w", err)
	}
	return time.Duration(user+nice+system) * clockTick, nil
}
