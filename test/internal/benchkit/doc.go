// Package benchkit owns what the benchmark programs under test/bench share:
// a program's life (flags common to all, exit codes, interrupts, running as
// the counter worker plugin when re-executed as one), the agent under test
// and its counter group, the page client that speaks the front's WebSocket
// protocol like one browser tab, and the helpers their reports are written
// with (the machine line, nearest-rank percentiles, durations).
//
// It measures nothing and prints no table: what is measured and how it is
// reported belongs to each program. It must never assert a timing, and it
// reaches the agent only through its public API and its front, as a
// browser would.
package benchkit
