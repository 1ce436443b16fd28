// Package host serves the workers: it runs the worker processes of the
// groups placed on this agent and relays their channels, and it is where any
// agent reaches any worker and where workers reach the cluster.
//
//   - The pool (pool.go, worker.go, probe.go, frames.go): each worker sits
//     in a slot with a stable id ("web-1"); when its process exits, the slot
//     records how and starts a replacement, and frames for the slot wait
//     (bounded by their context) until it is back.
//   - Routing (router.go, links.go): the Router reaches a worker of this
//     agent through the pool and one of another agent over a peer link; the
//     LinkServer serves the links other agents dial.
//   - Parked packages (parcels.go): ClusterParcels read a package here or
//     fetch it from the agent that parked it.
//   - What workers ask of the cluster (workercalls.go, tables.go,
//     storecalls.go): live data tables, the global store and its grants;
//     gateway calls and logouts are handed to the agent's functions.
//   - Crash checkpoints (checkpoint.go, checkpointload.go, journal.go): the
//     index of the pieces, its journal, and its load at start.
//
// The host decides nothing about people: where a user lives is the
// supervisor's business, read from the maps and written through the
// leader's log. It never imports the agent: what it needs of it comes in
// each type's Config.
package host
