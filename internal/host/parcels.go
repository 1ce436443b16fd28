package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/park"
)

// ClusterParcelsConfig is what ClusterParcels are built from.
type ClusterParcelsConfig struct {
	// Name is this agent's name in the maps (never asked for a package).
	Name string
	// Store is this agent's store of parked packages, read first.
	Store park.Store
	// Maps list the other agents, and their admin addresses.
	Maps *fsm.FSM
	// Fetch calls another agent's admin API (method, its address, path,
	// body) and returns the answer's body.
	Fetch func(ctx context.Context, method, addr, path string, body []byte) ([]byte, error)
	// Hold keeps a package fetched from another agent in this agent's
	// store (in memory if there is room), returning its digest.
	Hold func(b []byte) (string, error)
}

// ClusterParcels are the pool's Parcels in a cluster: a parked package is
// read from this agent's store, or fetched from the agent that parked it
// (checked against its digest, then held here).
type ClusterParcels struct {
	cfg ClusterParcelsConfig
}

var _ Parcels = (*ClusterParcels)(nil)

// NewClusterParcels returns the parcels of cfg.
func NewClusterParcels(cfg ClusterParcelsConfig) *ClusterParcels {
	return &ClusterParcels{cfg: cfg}
}

// Get implements Parcels. It returns park.ErrNotFound when no agent has
// the package, and park.ErrCorrupt when one answers with other bytes.
func (c *ClusterParcels) Get(digest string) ([]byte, error) {
	b, err := c.cfg.Store.Get(digest)
	if err == nil || !errors.Is(err, park.ErrNotFound) {
		return b, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ag := range c.cfg.Maps.Agents() {
		if ag.Name == c.cfg.Name {
			continue
		}
		b, ferr := c.cfg.Fetch(ctx, "GET", ag.AdminAddr, "/v1/internal/park/"+digest, nil)
		if ferr != nil {
			continue
		}
		if park.Digest(b) != digest {
			return nil, fmt.Errorf("%w: %s fetched from %s", park.ErrCorrupt, digest, ag.Name)
		}
		if _, err := c.cfg.Hold(b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, err
}
