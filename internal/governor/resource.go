package governor

import (
	"fmt"
	"maps"
	"time"
)

// Resource is one thing a worker can run out of. Saturation is watched per
// resource, never as an average.
type Resource int

// The watched resources. Their numbers are not persisted anywhere; policies
// name them by String.
const (
	// CPU is the processor time a worker uses, in cores.
	CPU Resource = iota
	// Memory is the worker's resident memory (its heap when RSS is unknown), in bytes.
	Memory
	// Goroutines is the number of goroutines of the worker.
	Goroutines
	// Mailbox is the number of frames waiting in the worker's user mailboxes.
	Mailbox
)

// allResources lists the resources in the fixed order every loop uses, so
// that decisions never depend on map iteration order.
var allResources = [...]Resource{CPU, Memory, Goroutines, Mailbox}

// String returns the resource's name as policies spell it: "cpu", "memory",
// "goroutines", "mailbox".
func (r Resource) String() string {
	switch r {
	case CPU:
		return "cpu"
	case Memory:
		return "memory"
	case Goroutines:
		return "goroutines"
	case Mailbox:
		return "mailbox"
	}
	return fmt.Sprintf("resource(%d)", int(r))
}

// ParseResource returns the resource named s (as String spells it).
func ParseResource(s string) (Resource, error) {
	for _, r := range allResources {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("parsing resource %q: want cpu, memory, goroutines or mailbox", s)
}

// Reading is one probe answer of one worker: its numbers and, by being there,
// the proof that it is alive.
type Reading struct {
	// Worker names the worker (its slot id, e.g. "web-2") and Group its group.
	Worker, Group string
	// At is when the probe was answered, on the caller's clock.
	At time.Time
	// CPU is the processor time used since the previous probe, in cores
	// (1.5 means one and a half cores busy).
	CPU float64
	// RSS is the resident set size in bytes; Heap the Go heap in bytes. The
	// memory resource is RSS, or Heap when RSS is 0 (unknown).
	RSS, Heap uint64
	// Goroutines is the worker's goroutine count.
	Goroutines int
	// MailboxDepth is the number of frames queued in the worker's mailboxes.
	MailboxDepth int
	// Users, Pages and Grants are what the worker holds. A worker is empty,
	// and may be retired, only when all three are 0.
	Users, Pages, Grants int
	// PerUser is what each user held by the worker consumed recently (over
	// the worker's own accounting window, e.g. since the previous probe).
	// Only users named here can be chosen to leave.
	PerUser map[string]Usage
}

// Usage is what one user consumed recently on their worker.
type Usage struct {
	// CPU is the user's processor time, in cores.
	CPU float64
	// MemGrowth is how many bytes the user's state grew by; a shrink counts
	// as 0 when drawing who leaves.
	MemGrowth float64
	// Goroutines is the number of goroutines working for the user.
	Goroutines int
	// Mailbox is the number of the user's frames waiting in their mailbox.
	Mailbox int
}

// Memory returns the memory figure the engine watches: RSS, or Heap when RSS
// is unknown.
func (r Reading) Memory() uint64 {
	if r.RSS > 0 {
		return r.RSS
	}
	return r.Heap
}

// empty reports whether the reading shows nothing held: no user, no page, no
// grant.
func (r Reading) empty() bool {
	return r.Users == 0 && r.Pages == 0 && r.Grants == 0 && len(r.PerUser) == 0
}

// value is the reading's figure for res, in the unit of its Threshold.Limit.
func (r Reading) value(res Resource) float64 {
	switch res {
	case CPU:
		return r.CPU
	case Memory:
		return float64(r.Memory())
	case Goroutines:
		return float64(r.Goroutines)
	case Mailbox:
		return float64(r.MailboxDepth)
	}
	return 0
}

// clone copies r so that the caller may reuse its map after Observe.
func (r Reading) clone() Reading {
	r.PerUser = maps.Clone(r.PerUser)
	return r
}

// weight is what u consumed of res, the weight of u in the draw of who leaves.
func (u Usage) weight(res Resource) float64 {
	var w float64
	switch res {
	case CPU:
		w = u.CPU
	case Memory:
		w = u.MemGrowth
	case Goroutines:
		w = float64(u.Goroutines)
	case Mailbox:
		w = float64(u.Mailbox)
	}
	if w < 0 || w != w { // negative or NaN
		return 0
	}
	return w
}

// consumption names what weight measures, for reasons: "used 38% of w-3's
// recent memory growth".
func consumption(res Resource) string {
	switch res {
	case CPU:
		return "recent cpu"
	case Memory:
		return "recent memory growth"
	case Goroutines:
		return "goroutines"
	case Mailbox:
		return "queued frames"
	}
	return res.String()
}
