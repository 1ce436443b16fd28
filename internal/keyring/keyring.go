// Package keyring owns the cluster's cookie key ring as an agent sees it:
// the keys this server brings (its cookie_key_files, cookie_key_file or an
// older version's key), the ring its front signs and verifies connection
// cookies with, the leader's seeding of the ring in the maps, the watch
// that hands the front every change, and /v1/operator/keyring.
//
// The ring itself lives in the maps (fsm/cookiering.go), so a person keeps
// one identity through every front. Only a leader writes it, and only keys
// it holds itself: no key ever travels on the admin API.
//
//   - The first leader seeds it: from its cookie_key_files (or
//     cookie_key_file), else from an older version's <data_dir>/cookie.key,
//     else with a random key.
//   - A leader whose cookie_key_files keep the ring's signing key and
//     differ from the ring (the operator rotated the files) installs them
//     when it takes the lead.
//   - `stickyd operator keyring rotate` has the leader put a new random key
//     first (a ring the servers do not bring in files).
//
// A server with files signs with the ring's first key and verifies with
// the ring and its files together, so a rotation of the files server by
// server logs nobody out. Files that share no key with the ring (another
// cluster's, a damaged or wrong file) are refused: at start the agent does
// not start, later the front keeps the ring it had and says why.
//
// The package sees the agent only through the small interfaces of Config
// (the maps' ring, the log, whether this server leads): it never holds the
// agent, never writes a ring it did not make itself or read from this
// server's files, and never lets a key out of the maps but as its id.
package keyring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/fsm"
)

// Maps is the replica of the maps as the ring is read from it (*fsm.FSM).
type Maps interface {
	// CookieRing is the cluster's ring, or nil before its first leader
	// seeds it.
	CookieRing() *fsm.CookieRing
	// WatchCookieRing returns a channel closed at the next change of the
	// ring.
	WatchCookieRing() <-chan struct{}
}

// Log writes an entry to the maps on this server, which must lead
// (*raftnode.Node: it does not forward).
type Log interface {
	Apply(ctx context.Context, entry []byte) (any, error)
}

// Leader says whether this server leads (*raftnode.Node). The request
// handlers ask it only to forward; Settle asks it because it runs before
// the leader's tasks start (see Settle).
type Leader interface {
	IsLeader() bool
}

// Config is what a Keeper is built from.
type Config struct {
	// Mine is the keys this server brings (Read).
	Mine Configured
	Maps Maps
	Log  Log
	// Leader says whether this server leads.
	Leader Leader
	// Forward passes a request a follower got to the leader, with its
	// body, and answers with the leader's answer.
	Forward func(w http.ResponseWriter, r *http.Request, body []byte) error
	// Registry is where Settle registers the front's ring metrics.
	Registry prometheus.Registerer
	Logger   hclog.Logger
}

// Keeper is one agent's side of the cookie key ring: it settles the ring
// its front starts with (Settle), seeds the maps' ring as a leader's task
// (Seed), hands the front every change (Watch) and serves the operator's
// routes (Routes).
type Keeper struct {
	cfg Config
	log hclog.Logger
	// keys and refused are the front's ring metrics, set by Settle.
	keys    prometheus.Gauge
	refused prometheus.Counter
}

// New builds a Keeper; it does nothing until one of its methods runs.
func New(cfg Config) *Keeper {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Keeper{cfg: cfg, log: log}
}

// Settle waits until the maps hold the cluster's ring (seeding it if this
// server leads and there is none) and returns the keys this front signs
// and verifies with. It is called once, by an agent with a front, before
// Watch: it registers the front's ring metrics on Registry.
func (k *Keeper) Settle(ctx context.Context) ([][]byte, error) {
	if err := k.registerMetrics(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		// A leader seeds the ring as its term begins (Seed, a leader's
		// task); one that leads as it starts seeds it here too, so that
		// its front opens with the ring in force (its files may be the
		// ring's successor): the leader's tasks start after the front.
		changed := k.cfg.Maps.WatchCookieRing()
		if k.cfg.Leader.IsLeader() {
			k.Seed(ctx)
		}
		if r := k.cfg.Maps.CookieRing(); r != nil {
			keys, differs, err := ringInForce(r, k.cfg.Mine.keys, k.cfg.Mine.source)
			if err != nil {
				return nil, err
			}
			if differs {
				k.log.Warn("this server's cookie key files differ from the cluster's ring; it signs with the ring's first key and verifies with both "+
					"(the leader installs files that keep the ring's first key when it takes the lead)",
					"files", fsm.RingID(k.cfg.Mine.keys), "ring", fsm.RingID(r.Keys))
			}
			k.keys.Set(float64(len(keys)))
			return keys, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, errors.New("waiting for the cluster's cookie key ring: the maps hold none after a minute (the leader seeds it; is the leader of this version?)")
		}
	}
}

// Seed, on the leader, installs the ring this server brings when the maps
// hold none, or when its files are the ring's successor. A new leader
// calls it once the maps hold the last leader's entries (after a barrier).
func (k *Keeper) Seed(ctx context.Context) {
	req := ringToInstall(k.cfg.Maps.CookieRing(), k.cfg.Mine.keys, k.cfg.Mine.source)
	if req == nil {
		return
	}
	entry, err := fsm.Encode(fsm.CookieRingRequestType, req)
	if err != nil {
		k.log.Error("encoding the cookie key ring", "error", err)
		return
	}
	switch _, err := k.cfg.Log.Apply(ctx, entry); {
	case errors.Is(err, fsm.ErrRingChanged):
	case err != nil:
		k.log.Warn("installing the cookie key ring", "error", err)
	default:
		k.log.Info("installed the cluster's cookie key ring", "keys", fsm.RingID(req.Keys), "source", req.Source)
	}
}

// Watch hands every change of the cluster's ring to the front through set
// (the front's SetCookieKeys), until stop closes. It runs after Settle.
func (k *Keeper) Watch(stop <-chan struct{}, set func(keys [][]byte) error) {
	last := ""
	for {
		changed := k.cfg.Maps.WatchCookieRing()
		if r := k.cfg.Maps.CookieRing(); r != nil && fsm.RingID(r.Keys) != last {
			keys, _, err := ringInForce(r, k.cfg.Mine.keys, k.cfg.Mine.source)
			if err == nil {
				err = set(keys)
			}
			if err != nil {
				k.refused.Inc()
				k.log.Error("the cluster's cookie key ring changed to one this front cannot take; it keeps the ring it had", "error", err)
			} else {
				k.keys.Set(float64(len(keys)))
				if last != "" {
					k.log.Info("the cluster's cookie key ring changed", "keys", fsm.RingID(r.Keys))
				}
			}
			last = fsm.RingID(r.Keys)
		}
		select {
		case <-stop:
			return
		case <-changed:
		}
	}
}

func (k *Keeper) registerMetrics() error {
	k.keys = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stickyd_front_cookie_ring_keys",
		Help: "Keys of the cookie key ring this front verifies with (the first signs).",
	})
	k.refused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stickyd_front_cookie_ring_refused_total",
		Help: "Changes of the cluster's cookie key ring this front refused: they share no key with its cookie_key_files.",
	})
	if k.cfg.Registry == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{k.keys, k.refused} {
		if err := k.cfg.Registry.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// ringToInstall is the ring a leader bringing mine (from source) installs
// over r, or nil.
func ringToInstall(r *fsm.CookieRing, mine [][]byte, source string) *fsm.CookieRingRequest {
	if r == nil {
		switch source {
		case fromFiles:
			return &fsm.CookieRingRequest{Keys: mine, Source: fsm.RingFiles}
		case fromLegacy:
			return &fsm.CookieRingRequest{Keys: mine, Source: fsm.RingGenerated}
		}
		return &fsm.CookieRingRequest{Keys: [][]byte{newKey()}, Source: fsm.RingGenerated}
	}
	if source != fromFiles || fsm.RingID(mine) == fsm.RingID(r.Keys) || !holds(mine, r.Keys[0]) {
		return nil
	}
	return &fsm.CookieRingRequest{Keys: mine, Source: fsm.RingFiles, Expect: fsm.RingID(r.Keys)}
}

// ringInForce is the ring a front uses with the cluster's ring r and the
// keys this server brings: r alone, or, with files, r's first key
// signing and r's and the files' keys verifying (differs: they are not
// r). Files sharing no key with r are refused.
func ringInForce(r *fsm.CookieRing, mine [][]byte, source string) (keys [][]byte, differs bool, err error) {
	if source != fromFiles {
		return r.Keys, false, nil
	}
	shared := false
	for _, k := range mine {
		shared = shared || holds(r.Keys, k)
	}
	if !shared {
		return nil, true, fmt.Errorf("this server's cookie key files (key ids %s) share no key with the cluster's ring (key ids %s): "+
			"every server must hold the same key files. A damaged, wrong or other cluster's file here would give every person a new identity "+
			"on this front; restore the files from another server (docs/security.md)", fsm.RingID(mine), fsm.RingID(r.Keys))
	}
	keys = append(keys, r.Keys...)
	for _, k := range mine {
		if !holds(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys, fsm.RingID(mine) != fsm.RingID(r.Keys), nil
}

func holds(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}
