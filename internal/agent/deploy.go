package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/stickyd/stickyd/internal/consul"
	"github.com/stickyd/stickyd/internal/maintenance"
	"github.com/stickyd/stickyd/internal/nomad"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/tlsutil"
)

// The deployment around the agent (docs/deploy-nomad.md): hosts join the
// servers as non-voting raft members; servers find each other and hosts
// find servers through Consul; the leader, and only the leader, publishes
// the placement registry into Consul KV and runs each catalog group as a
// Nomad job.

// consulClient is the Consul client of the consul block, nil without one.
func (a *Agent) consulClient() *consul.Client {
	a.consulOnce.Do(func() {
		k := a.cfg.Consul
		if k == nil {
			return
		}
		c, err := consul.New(consul.Config{Address: k.Address, Token: k.Token, Datacenter: k.Datacenter, Prefix: k.Prefix})
		if err != nil {
			a.log.Error("connecting to Consul", "address", k.Address, "error", err)
			return
		}
		a.consul = c
	})
	return a.consul
}

// discoverServers finds the servers' admin addresses in Consul (none
// without a consul block).
func (a *Agent) discoverServers(ctx context.Context) ([]string, error) {
	c := a.consulClient()
	if c == nil {
		return nil, nil
	}
	return c.Services(ctx, a.cfg.Consul.ServerService)
}

// consulKV is the consul block's KV store for the maintenance windows,
// nil without one.
func (a *Agent) consulKV() maintenance.KV {
	if c := a.consulClient(); c != nil {
		return c
	}
	return nil // not a typed nil: the windows go to the maps
}

// startDeployment starts the leader's publishing loops the configuration
// asks for.
func (a *Agent) startDeployment() {
	if k := a.cfg.Consul; k != nil && a.cfg.IsServer() && (k.Mirror == nil || *k.Mirror) {
		a.leadership.Add("publish the placement registry to Consul", a.mirrorLoop)
	}
	if a.cfg.Nomad != nil {
		a.leadership.Add("keep the groups' Nomad jobs", a.nomadLoop)
	}
	if a.cfg.Consul != nil && a.cfg.IsServer() {
		a.leadership.Add("copy the maintenance windows from Consul", a.maint.CopyFromConsul)
	}
}

// mirrorLoop publishes the placement registry to Consul KV while this
// server leads (a leader task: stop closes when the term ends): who is
// where, the groups, and the raft index it is as of. Each tick writes the
// people who changed since the last (consul.Mirror's Sync); a new term, or
// a failed write, publishes everything once.
func (a *Agent) mirrorLoop(stop <-chan struct{}) {
	var (
		m        *consul.Mirror
		failures int
	)
	reg := registry{a}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if _, torn := a.fsm.TornDown(); torn {
			continue // the tear-down empties the prefix; nothing is written again
		}
		c := a.consulClient()
		if c == nil {
			continue
		}
		if m == nil {
			m = consul.NewMirror(c)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := m.Sync(ctx, reg)
		cancel()
		if err != nil {
			if failures%20 == 0 {
				a.log.Warn("publishing the placement registry to Consul", "error", err)
			}
			failures++
			continue
		}
		failures = 0
	}
}

// registry is the placement registry as the mirror reads it from the maps.
type registry struct{ a *Agent }

var _ consul.Registry = registry{}

func (r registry) Changes() (uint64, map[string]*consul.User, bool) {
	index, changed, all := r.a.fsm.TakeChanges()
	if all {
		return index, nil, true
	}
	out := make(map[string]*consul.User, len(changed))
	for name, u := range changed {
		if u == nil {
			out[name] = nil
			continue
		}
		e := r.a.placedUser(*u)
		out[name] = &e
	}
	return index, out, false
}

func (r registry) Placement(index uint64) consul.Placement { return r.a.placementSnapshot(index) }

func (r registry) Groups() map[string]json.RawMessage { return r.a.groupsJSON() }

// placedUser is where u is, in the registry's words.
func (a *Agent) placedUser(u placement.UserInfo) consul.User {
	e := consul.User{Worker: u.Worker, Epoch: u.Epoch, State: u.State, Group: a.router.GroupOf(u.Worker)}
	if ag, ok := a.fsm.AgentOf(u.Worker); ok {
		e.Host = ag.Name
	} else if a.pool.GroupOf(u.Worker) != "" {
		e.Host = a.cfg.Name
	}
	return e
}

// placementSnapshot is the placement registry as of the replica's index.
func (a *Agent) placementSnapshot(index uint64) consul.Placement {
	p := consul.Placement{Index: index, Users: map[string]consul.User{}, Groups: a.groupsJSON()}
	for _, u := range a.fsm.Users() {
		p.Users[u.User] = a.placedUser(u)
	}
	return p
}

// groupsJSON is each group's registry entry.
func (a *Agent) groupsJSON() map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	v := a.groupsView()
	for _, g := range v.Groups {
		b, err := json.Marshal(map[string]any{"name": g.Name, "runtime": g.Runtime, "bundle": g.Bundle, "workers": g.Workers,
			"source": g.Source, "default": g.Default, "previous": g.Previous, "users": g.Users, "worker_ids": g.WorkerIDs})
		if err == nil {
			out[g.Name] = b
		}
	}
	return out
}

// nomadLoop keeps one Nomad job per catalog group while this server leads
// (a leader task): registered when the group appears (re-registered when
// its recipe changes), stopped and purged when it is retired.
func (a *Agent) nomadLoop(stop <-chan struct{}) {
	n := a.cfg.Nomad
	client, err := a.nomadClient()
	if err != nil {
		a.log.Error("connecting to Nomad", "address", n.Address, "error", err)
		return
	}
	failures := 0
	for {
		changed := a.fsm.WatchCatalog()
		if _, torn := a.fsm.TornDown(); !torn {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := a.syncNomadJobs(ctx, client)
			cancel()
			if err != nil {
				if failures%10 == 0 {
					a.log.Warn("keeping the groups' Nomad jobs", "error", err)
				}
				failures++
			} else {
				failures = 0
			}
		}
		wait := 30 * time.Second
		if failures > 0 {
			wait = 2 * time.Second
		}
		select {
		case <-stop:
			return
		case <-changed:
		case <-time.After(wait):
		}
	}
}

// hostTLS reads what a group job's hosts need for mutual TLS: the
// cluster's CA (this server's tls.ca_file) and the host certificate and
// key of the nomad block, each PEM.
func (a *Agent) hostTLS() (ca, cert, key string, err error) {
	files := []string{a.cfg.TLS.CAFile, a.cfg.Nomad.HostCertFile, a.cfg.Nomad.HostKeyFile}
	out := make([]string, len(files))
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", "", "", fmt.Errorf("reading the hosts' TLS files: %w", err)
		}
		out[i] = string(b)
	}
	return out[0], out[1], out[2], nil
}

// nomadClient is a Nomad API client for the nomad block.
func (a *Agent) nomadClient() (*nomadapi.Client, error) {
	n := a.cfg.Nomad
	cfg := nomadapi.DefaultConfig()
	cfg.Address, cfg.SecretID, cfg.Region, cfg.Namespace = n.Address, n.Token, n.Region, n.Namespace
	return nomadapi.NewClient(cfg)
}

// syncNomadJobs registers the catalog's groups' jobs and purges the jobs of
// groups no longer in it.
func (a *Agent) syncNomadJobs(ctx context.Context, client *nomadapi.Client) error {
	n, k := a.cfg.Nomad, a.cfg.Consul
	cat := a.fsm.Catalog()
	var errs []error
	for _, name := range cat.GroupNames() {
		g := cat.Groups[name]
		if g.Bundle == "" {
			continue // a builtin or command group runs on the agents themselves
		}
		spec := nomad.GroupJob{Group: name, Bundle: g.Bundle, Archive: n.Archive, Workers: g.Workers,
			Count: n.Hosts, MaxCount: n.MaxHosts, Datacenters: n.Datacenters, Namespace: n.Namespace, Region: n.Region,
			Driver: n.Driver, StickydCommand: n.StickydCommand, ConsulAddr: k.Address, ConsulToken: k.Token,
			ServerService: k.ServerService, CPU: n.CPU, MemoryMB: n.MemoryMB, DiskMB: n.DiskMB,
			NodePool: n.NodePool, DistinctHosts: n.DistinctHosts, Env: g.Env}
		if n.StickydArtifact != "" {
			spec.Stickyd = nomad.Artifact{Source: n.StickydArtifact, Checksum: n.StickydChecksum}
		}
		secrets := nomad.Secrets{AdminToken: a.token, ConsulToken: k.Token}
		if a.cfg.TLS != nil {
			var err error
			if secrets.TLSCA, secrets.TLSCert, secrets.TLSKey, err = a.hostTLS(); err != nil {
				errs = append(errs, fmt.Errorf("group %s: %w", name, err))
				continue
			}
			spec.TLSCluster = cmp.Or(a.cfg.TLS.Cluster, tlsutil.DefaultCluster)
		}
		job, err := nomad.Render(spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", name, err))
			continue
		}
		// The secret first: the job's template waits for it.
		if err := nomad.PutSecrets(ctx, client, name, n.Namespace, n.Region, secrets); err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", name, err))
			continue
		}
		if _, err := nomad.Register(ctx, client, job); err != nil {
			errs = append(errs, fmt.Errorf("group %s: registering its job: %w", name, err))
		}
	}
	running, err := nomad.Jobs(ctx, client)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, group := range running {
		if _, ok := cat.Groups[group]; ok {
			continue
		}
		a.log.Info("stopping the Nomad job of a retired group", "group", group, "job", nomad.JobID(group))
		if err := nomad.Deregister(ctx, client, group, true); err != nil {
			errs = append(errs, fmt.Errorf("group %s: stopping its job: %w", group, err))
			continue
		}
		if err := nomad.DeleteSecrets(ctx, client, group); err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", group, err))
		}
	}
	return errors.Join(errs...)
}
