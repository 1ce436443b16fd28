package nomad

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/stickyd/stickyd/internal/consul"
	"github.com/stickyd/stickyd/internal/fsm"
)

// Maps is what a Keeper reads of the replicated maps (*fsm.FSM).
type Maps interface {
	// Catalog is the catalog's groups.
	Catalog() fsm.Catalog
	// WatchCatalog closes when the catalog changes.
	WatchCatalog() <-chan struct{}
	// TornDown says the deployment is being taken apart.
	TornDown() (time.Time, bool)
}

var _ Maps = (*fsm.FSM)(nil)

// Log is the raft log a tear-down is recorded in (*raftnode.Node): only
// the leader applies.
type Log interface {
	Apply(ctx context.Context, entry []byte) (any, error)
	IsLeader() bool
}

// API says how to reach Nomad's HTTP API (the nomad block).
type API struct {
	Address, Token, Region, Namespace string
}

// TLSFiles are the PEM files a group job's hosts need for mutual TLS: the
// cluster's CA and a host certificate and key. They are read at each
// registration, so a renewed certificate reaches the next one.
type TLSFiles struct {
	CA, Cert, Key string
}

// Config is what a Keeper needs: the maps, the nomad block and how to
// reach the leader.
type Config struct {
	// Maps are the replicated maps: the catalog's groups, and whether the
	// deployment is torn down.
	Maps Maps
	// Log records a tear-down.
	Log Log
	// API is the Nomad API; nil without a nomad block: Run returns at
	// once and a tear-down leaves Nomad alone.
	API *API
	// Job is what the jobs of every group share (from the nomad, consul
	// and tls blocks); the Keeper fills in each group's Group, Bundle,
	// Workers and Env from the catalog.
	Job GroupJob
	// TLS are the hosts' TLS files, written to each job's variable; nil
	// without a tls block.
	TLS *TLSFiles
	// AdminToken is the cluster's admin token: it goes to each job's
	// variable (Secrets).
	AdminToken string
	// Consul is the consul block's client, nil without one: a tear-down
	// empties its prefix.
	Consul func() *consul.Client
	// LeaderAdmin is the leader's admin API address, "" while none is
	// known; Remote makes the call to it: a follower forwards a tear-down
	// to the leader, whose answer streams.
	LeaderAdmin func(ctx context.Context) string
	Remote      Streamer
	Logger      hclog.Logger
}

// Streamer makes calls to another agent's admin API whose answer streams
// (server.Remote).
type Streamer interface {
	AdminRequest(ctx context.Context, method, addr, path string, body io.Reader) (*http.Request, error)
	StreamClient() *http.Client
}

// Keeper keeps one Nomad job per catalog group while this server leads
// (Run) and takes the deployment apart on the operator's word (Routes).
// It never touches a job whose ID does not start with JobPrefix.
type Keeper struct {
	cfg Config
}

// New prepares a Keeper.
func New(cfg Config) *Keeper {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Consul == nil {
		cfg.Consul = func() *consul.Client { return nil }
	}
	return &Keeper{cfg: cfg}
}

// Run keeps the groups' jobs until stop closes (a leader task: stop closes
// when the term ends): a job is registered when its group appears
// (re-registered when its recipe changes), stopped and purged when it is
// retired. Nothing is registered once the deployment is torn down.
func (k *Keeper) Run(stop <-chan struct{}) {
	if k.cfg.API == nil {
		return
	}
	client, err := k.client()
	if err != nil {
		k.cfg.Logger.Error("connecting to Nomad", "address", k.cfg.API.Address, "error", err)
		return
	}
	failures := 0
	for {
		changed := k.cfg.Maps.WatchCatalog()
		if _, torn := k.cfg.Maps.TornDown(); !torn {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := k.sync(ctx, client)
			cancel()
			if err != nil {
				if failures%10 == 0 {
					k.cfg.Logger.Warn("keeping the groups' Nomad jobs", "error", err)
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

// hostTLS reads what a group job's hosts need for mutual TLS, each PEM.
func (k *Keeper) hostTLS() (ca, cert, key string, err error) {
	files := []string{k.cfg.TLS.CA, k.cfg.TLS.Cert, k.cfg.TLS.Key}
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

// client is a Nomad API client for the nomad block.
func (k *Keeper) client() (*api.Client, error) {
	n := k.cfg.API
	cfg := api.DefaultConfig()
	cfg.Address, cfg.SecretID, cfg.Region, cfg.Namespace = n.Address, n.Token, n.Region, n.Namespace
	return api.NewClient(cfg)
}

// sync registers the catalog's groups' jobs and purges the jobs of groups
// no longer in it.
func (k *Keeper) sync(ctx context.Context, client *api.Client) error {
	cat := k.cfg.Maps.Catalog()
	var errs []error
	for _, name := range cat.GroupNames() {
		g := cat.Groups[name]
		if g.Bundle == "" {
			continue // a builtin or command group runs on the agents themselves
		}
		spec := k.cfg.Job
		spec.Group, spec.Bundle, spec.Workers, spec.Env = name, g.Bundle, g.Workers, g.Env
		secrets := Secrets{AdminToken: k.cfg.AdminToken, ConsulToken: spec.ConsulToken}
		if k.cfg.TLS != nil {
			var err error
			if secrets.TLSCA, secrets.TLSCert, secrets.TLSKey, err = k.hostTLS(); err != nil {
				errs = append(errs, fmt.Errorf("group %s: %w", name, err))
				continue
			}
		}
		job, err := Render(spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", name, err))
			continue
		}
		// The secret first: the job's template waits for it.
		if err := PutSecrets(ctx, client, name, spec.Namespace, spec.Region, secrets); err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", name, err))
			continue
		}
		if _, err := Register(ctx, client, job); err != nil {
			errs = append(errs, fmt.Errorf("group %s: registering its job: %w", name, err))
		}
	}
	running, err := Jobs(ctx, client)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, group := range running {
		if _, ok := cat.Groups[group]; ok {
			continue
		}
		k.cfg.Logger.Info("stopping the Nomad job of a retired group", "group", group, "job", JobID(group))
		if err := Deregister(ctx, client, group, true); err != nil {
			errs = append(errs, fmt.Errorf("group %s: stopping its job: %w", group, err))
			continue
		}
		if err := DeleteSecrets(ctx, client, group); err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", group, err))
		}
	}
	return errors.Join(errs...)
}
