// Package nomad turns a stickyd group into a Nomad job and keeps that job
// registered: Render builds the job of one group (a service job whose tasks
// run "stickyd agent" in the host role, with the group's bundle fetched as an
// artifact), and Register, Deregister and Jobs are what a reconciler on the
// Raft leader calls to make Nomad run the groups the cluster knows.
//
// The package only speaks to Nomad's HTTP API through the client it is
// given. It never reads the replicated state nor starts a goroutine, and it
// never touches a job whose ID does not start with JobPrefix.
package nomad
