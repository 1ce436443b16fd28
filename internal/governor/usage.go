package governor

import "time"

// Totals is what a user has consumed on a worker since they arrived there,
// as the worker's probes report it: running totals that only grow (Queued
// is a level, not a total).
type Totals struct {
	// BusySeconds is the time the user's handlers ran.
	BusySeconds float64
	// StateBytes counts the bytes written into the user's page trees.
	StateBytes uint64
	// Queued is the number of the user's frames waiting in their mailbox now.
	Queued int
}

// UsageSince is what a user consumed between two readings of their totals
// taken elapsed apart: the weight of the user in the draw of who leaves.
//
// A user with no earlier reading (before is nil: they arrived, or the
// governor started, since the last one) counts their whole state as growth:
// a person who wrote 72 MiB in one burst before their first reading is the
// heaviest grower, not a zero. Their CPU stays 0, since a rate needs two
// readings. Totals that went backwards (the worker was relaunched) count
// from zero, as a first reading does. elapsed ≤ 0 gives no CPU.
func UsageSince(before *Totals, now Totals, elapsed time.Duration) Usage {
	u := Usage{Mailbox: now.Queued}
	if before == nil || now.StateBytes < before.StateBytes || now.BusySeconds < before.BusySeconds {
		u.MemGrowth = float64(now.StateBytes)
		return u
	}
	u.MemGrowth = float64(now.StateBytes) - float64(before.StateBytes)
	if secs := elapsed.Seconds(); secs > 0 {
		u.CPU = (now.BusySeconds - before.BusySeconds) / secs
	}
	return u
}
