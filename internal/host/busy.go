package host

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// defaultBusyTimeout is how long a worker may burn CPU without answering a
// probe before it is killed all the same (Pool.BusyTimeout).
const defaultBusyTimeout = 10 * time.Minute

// progress reads whether a worker's process used CPU since the last
// reading: a worker that answers no probe but computes is busy (a Python
// app call holding the GIL), one that neither answers nor computes is
// stuck or stopped.
type progress struct {
	pid  int
	last uint64
	ok   bool
}

// moved reads the process's CPU time and reports whether it grew by at
// least min clock ticks since the last reading (a runtime's own
// housekeeping in an idle or stuck process is a tick now and then; an app
// call that computes takes most of a core); false where it cannot be read
// (no pid of its own, not Linux).
func (p *progress) moved(min uint64) bool {
	if p.pid <= 0 {
		return false
	}
	t, err := cpuTicks(p.pid)
	if err != nil {
		p.ok = false
		return false
	}
	grew := p.ok && t >= p.last+max(min, 1)
	p.last, p.ok = t, true
	return grew
}

// userHZ is the unit of /proc/PID/stat's CPU times: USER_HZ, 100 on every
// Linux architecture Go runs on (the kernel converts to it).
const userHZ = 100

// busyTicks is the CPU a worker must burn over a probe interval to count
// as busy rather than stuck: a quarter of it.
func busyTicks(interval time.Duration) uint64 {
	return uint64(interval.Seconds() * userHZ / 4)
}

// cpuTicks is the user and system CPU time of process pid in clock ticks
// (fields 14 and 15 of /proc/PID/stat).
func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("process %d: unreadable stat", pid)
	}
	f := bytes.Fields(b[i+1:]) // from field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("process %d: short stat", pid)
	}
	var sum uint64
	for _, x := range f[11:13] {
		n, err := strconv.ParseUint(string(x), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("process %d: CPU time %q: %w", pid, x, err)
		}
		sum += n
	}
	return sum, nil
}

// busy records whether the slot's worker is busy without answering: since
// (zero: answering again). It returns when the busy span began.
func (s *slot) busy(since time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case since.IsZero():
		if !s.info.BusySince.IsZero() {
			s.log.Info("worker answers its probes again", "busy_for", time.Since(s.info.BusySince).Round(time.Millisecond))
		}
		s.info.BusySince = time.Time{}
	case s.info.BusySince.IsZero():
		s.info.BusySince = since
		s.log.Info("worker busy in the app: its probes wait, its process computes; not killed for silence")
	}
	return s.info.BusySince
}
