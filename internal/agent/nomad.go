package agent

import (
	"cmp"

	"github.com/stickyd/stickyd/internal/nomad"
	"github.com/stickyd/stickyd/internal/tlsutil"
)

// TeardownStep is one line of a tear-down's progress, owned by
// internal/nomad; the name stays for the API client's drift test.
type TeardownStep = nomad.TeardownStep

// nomadConfig is the nomad, consul and tls blocks as the Nomad jobs'
// keeper takes them, and how it reaches the leader.
func (a *Agent) nomadConfig() nomad.Config {
	cfg := nomad.Config{Maps: a.fsm, Log: a.raft, AdminToken: a.token, Consul: a.consulClient,
		LeaderAdmin: a.cluster.LeaderAdmin, Remote: a.remote, Logger: a.log}
	n, k := a.cfg.Nomad, a.cfg.Consul
	if n == nil {
		return cfg
	}
	cfg.API = &nomad.API{Address: n.Address, Token: n.Token, Region: n.Region, Namespace: n.Namespace}
	cfg.Job = nomad.GroupJob{Archive: n.Archive, Count: n.Hosts, MaxCount: n.MaxHosts, Datacenters: n.Datacenters,
		Namespace: n.Namespace, Region: n.Region, Driver: n.Driver, StickydCommand: n.StickydCommand,
		ConsulAddr: k.Address, ConsulToken: k.Token, ServerService: k.ServerService, CPU: n.CPU, MemoryMB: n.MemoryMB,
		DiskMB: n.DiskMB, NodePool: n.NodePool, DistinctHosts: n.DistinctHosts}
	if n.StickydArtifact != "" {
		cfg.Job.Stickyd = nomad.Artifact{Source: n.StickydArtifact, Checksum: n.StickydChecksum}
	}
	if a.cfg.TLS != nil {
		cfg.TLS = &nomad.TLSFiles{CA: a.cfg.TLS.CAFile, Cert: n.HostCertFile, Key: n.HostKeyFile}
		cfg.Job.TLSCluster = cmp.Or(a.cfg.TLS.Cluster, tlsutil.DefaultCluster)
	}
	return cfg
}
