// Package governor is the decision engine of governance: it owns the rules by
// which the supervisor balances, replaces and compacts the workers of each
// group, and the explanation of every decision it takes.
//
// The caller (the supervisor's leader-only governance loop) feeds it probe
// readings with Observe and asks it what to do with Decide, passing the clock;
// it carries out each Decision itself (a Move through internal/move, starting
// a worker, retiring one) and reports the outcome with Done, which is when
// cool-downs start. Events returns the bounded history of what was decided,
// what completed and what was held back, each with a reason carrying numbers.
//
// The engine never does IO, never starts a goroutine, never reads the wall
// clock and never moves anybody itself: it only answers. Given the same
// readings, clock values and seed of its *rand.Rand it returns the same
// decisions. An Engine is not safe for concurrent use: one goroutine (the
// governance loop) owns it.
//
// Four rules, each configured per group by a Policy:
//
//   - Saturation: a worker over the high mark of any single resource (cpu,
//     memory, goroutines, mailbox depth) gives up users until it is back under
//     the low mark, whatever its average load. The leaver is drawn at random
//     in proportion to what each user recently consumed of that resource; the
//     destination is the least saturated worker of the group with room, and
//     when none has room a worker is started first (up to MaxWorkers).
//   - Replacement: the memory of each worker is fitted by least squares over
//     a window; when the projected time to the memory ceiling falls under the
//     horizon, a fresh worker is started, everyone is moved there and the old
//     worker is retired.
//   - Compaction: when every worker of a group stays under a low-water mark
//     for a while, the least loaded one is drained and retired.
//   - Retirement: only a draining worker whose reading shows 0 users, 0 pages
//     and 0 grants is ever retired.
package governor
