// Package nomad runs stickyd's groups as Nomad jobs: Render builds the job of
// one group (a service job whose tasks run "stickyd agent" in the host role,
// with the group's bundle fetched as an artifact), and Register, Deregister
// and Jobs speak to Nomad's HTTP API through the client they are given.
// Keeper is the Raft leader's reconciler built on them: it reads the
// catalog from the maps and keeps one job per group while the server leads
// (Run, a leader task), and it serves the operator's tear-down, which takes
// the deployment apart (the group jobs, their variables, the Consul prefix).
//
// The package never writes the replicated state but the tear-down's record,
// starts no goroutine of its own (Run is the caller's), and never touches a
// job whose ID does not start with JobPrefix.
package nomad
