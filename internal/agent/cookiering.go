package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
)

// The cluster's cookie key ring lives in the maps (fsm/cookiering.go), so
// a person keeps one identity through every front. Only a leader writes
// it, and only keys it holds itself: no key ever travels on the admin API.
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

// settleCookieRing waits until the maps hold the cluster's ring (seeding
// it if this server leads and there is none) and returns the keys this
// front signs and verifies with.
func (a *Agent) settleCookieRing(ctx context.Context) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		// A leader seeds the ring as its term begins
		// (establishLeadership); one that leads as it starts seeds it
		// here too, so that its front opens with the ring in force (its
		// files may be the ring's successor).
		changed := a.fsm.WatchCookieRing()
		if a.raft.IsLeader() {
			a.seedCookieRing(ctx)
		}
		if r := a.fsm.CookieRing(); r != nil {
			keys, differs, err := ringInForce(r, a.ringMine, a.ringSource)
			if err != nil {
				return nil, err
			}
			if differs {
				a.log.Warn("this server's cookie key files differ from the cluster's ring; it signs with the ring's first key and verifies with both "+
					"(the leader installs files that keep the ring's first key when it takes the lead)",
					"files", fsm.RingID(a.ringMine), "ring", fsm.RingID(r.Keys))
			}
			a.ringKeys.Set(float64(len(keys)))
			return keys, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, errors.New("waiting for the cluster's cookie key ring: the maps hold none after a minute (the leader seeds it; is the leader of this version?)")
		}
	}
}

// seedCookieRing, on the leader, installs the ring this server brings
// when the maps hold none, or when its files are the ring's successor.
func (a *Agent) seedCookieRing(ctx context.Context) {
	req := ringToInstall(a.fsm.CookieRing(), a.ringMine, a.ringSource)
	if req == nil {
		return
	}
	entry, err := fsm.Encode(fsm.CookieRingRequestType, req)
	if err != nil {
		a.log.Error("encoding the cookie key ring", "error", err)
		return
	}
	switch _, err := a.raft.Apply(ctx, entry); {
	case errors.Is(err, fsm.ErrRingChanged):
	case err != nil:
		a.log.Warn("installing the cookie key ring", "error", err)
	default:
		a.log.Info("installed the cluster's cookie key ring", "keys", fsm.RingID(req.Keys), "source", req.Source)
	}
}

// ringToInstall is the ring a leader bringing mine (from source) installs
// over r, or nil.
func ringToInstall(r *fsm.CookieRing, mine [][]byte, source string) *fsm.CookieRingRequest {
	if r == nil {
		switch source {
		case ringFromFiles:
			return &fsm.CookieRingRequest{Keys: mine, Source: fsm.RingFiles}
		case ringFromLegacy:
			return &fsm.CookieRingRequest{Keys: mine, Source: fsm.RingGenerated}
		}
		return &fsm.CookieRingRequest{Keys: [][]byte{newCookieKey()}, Source: fsm.RingGenerated}
	}
	if source != ringFromFiles || fsm.RingID(mine) == fsm.RingID(r.Keys) || !holds(mine, r.Keys[0]) {
		return nil
	}
	return &fsm.CookieRingRequest{Keys: mine, Source: fsm.RingFiles, Expect: fsm.RingID(r.Keys)}
}

// ringInForce is the ring a front uses with the cluster's ring r and the
// keys this server brings: r alone, or, with files, r's first key
// signing and r's and the files' keys verifying (differs: they are not
// r). Files sharing no key with r are refused.
func ringInForce(r *fsm.CookieRing, mine [][]byte, source string) (keys [][]byte, differs bool, err error) {
	if source != ringFromFiles {
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

// watchCookieRing hands every change of the cluster's ring to the front.
func (a *Agent) watchCookieRing(stop <-chan struct{}) {
	last := ""
	for {
		changed := a.fsm.WatchCookieRing()
		if r := a.fsm.CookieRing(); r != nil && fsm.RingID(r.Keys) != last {
			keys, _, err := ringInForce(r, a.ringMine, a.ringSource)
			if err == nil {
				err = a.front.SetCookieKeys(keys)
			}
			if err != nil {
				a.ringRefused.Inc()
				a.log.Error("the cluster's cookie key ring changed to one this front cannot take; it keeps the ring it had", "error", err)
			} else {
				a.ringKeys.Set(float64(len(keys)))
				if last != "" {
					a.log.Info("the cluster's cookie key ring changed", "keys", fsm.RingID(r.Keys))
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

func newRingMetrics(reg prometheus.Registerer) (prometheus.Gauge, prometheus.Counter, error) {
	keys := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stickyd_front_cookie_ring_keys",
		Help: "Keys of the cookie key ring this front verifies with (the first signs).",
	})
	refused := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stickyd_front_cookie_ring_refused_total",
		Help: "Changes of the cluster's cookie key ring this front refused: they share no key with its cookie_key_files.",
	})
	for _, c := range []prometheus.Collector{keys, refused} {
		if err := reg.Register(c); err != nil {
			return nil, nil, err
		}
	}
	return keys, refused, nil
}

// KeyringKey is one key of the cookie key ring as the API shows it: its id
// and whether it signs. Keys themselves never leave the maps.
type KeyringKey struct {
	ID    string `json:"id"`
	Signs bool   `json:"signs"`
}

// Keyring is GET /v1/operator/keyring.
type Keyring struct {
	// Keys is the cluster's ring, in the maps; Source where it came from
	// (generated, files) and Index the log index that installed it.
	Keys   []KeyringKey `json:"keys"`
	Source string       `json:"source"`
	Index  uint64       `json:"index"`
	// Files are the ids of this server's cookie key files, if it has any.
	Files []string `json:"files,omitempty"`
}

// keepOnRotate is how many earlier keys a rotation keeps behind the new
// one: cookies signed with them still verify (and are renewed at once).
const keepOnRotate = 3

func (a *Agent) keyringHandler(w http.ResponseWriter, r *http.Request) error {
	ring := a.fsm.CookieRing()
	if ring == nil {
		return &api.Error{Status: http.StatusServiceUnavailable, Message: "the cluster has no cookie key ring yet (its leader makes it at the first start); retry"}
	}
	out := Keyring{Source: ring.Source, Index: ring.Index}
	for i, k := range ring.Keys {
		out.Keys = append(out.Keys, KeyringKey{ID: fsm.KeyID(k), Signs: i == 0})
	}
	if a.ringSource == ringFromFiles {
		for _, k := range a.ringMine {
			out.Files = append(out.Files, fsm.KeyID(k))
		}
	}
	writeJSONOK(w, out)
	return nil
}

// keyringRotateHandler has the leader put a new random key first in the
// ring, the earlier ones behind it (drop_old: none, which logs everyone
// out: for a key that leaked). A follower forwards the call; the new key
// is made on the leader and travels only in raft.
func (a *Agent) keyringRotateHandler(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		DropOld bool `json:"drop_old"`
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<12))
	if err != nil {
		return &api.Error{Status: http.StatusRequestEntityTooLarge, Message: "the request is too large"}
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return &api.Error{Status: http.StatusBadRequest, Message: `want {"drop_old": true|false}: ` + err.Error()}
		}
	}
	if !a.raft.IsLeader() {
		return a.forwardToLeader(w, r, body)
	}
	ring := a.fsm.CookieRing()
	switch {
	case ring == nil:
		return &api.Error{Status: http.StatusServiceUnavailable, Message: "the cluster has no cookie key ring yet; retry"}
	case ring.Source == fsm.RingFiles:
		return &api.Error{Status: http.StatusConflict, Message: "the cluster's cookie key ring comes from the servers' cookie_key_files: " +
			"rotate the files (a new key first, the old one behind it) on every server, then restart them, the leader last (docs/security.md)"}
	}
	keys := [][]byte{newCookieKey()}
	if !req.DropOld {
		keys = append(keys, ring.Keys[:min(len(ring.Keys), keepOnRotate)]...)
	}
	entry, err := fsm.Encode(fsm.CookieRingRequestType, fsm.CookieRingRequest{Keys: keys, Source: fsm.RingGenerated, Expect: fsm.RingID(ring.Keys)})
	if err != nil {
		return err
	}
	if _, err := a.raft.Apply(r.Context(), entry); err != nil {
		if errors.Is(err, fsm.ErrRingChanged) {
			return &api.Error{Status: http.StatusConflict, Message: "the ring changed meanwhile (another rotation); list it and retry"}
		}
		return &api.Error{Status: http.StatusServiceUnavailable, Message: "writing the new ring: " + err.Error()}
	}
	a.log.Info("rotated the cookie key ring", "keys", fsm.RingID(keys), "dropped_old", req.DropOld)
	out := Keyring{Source: fsm.RingGenerated}
	for i, k := range keys {
		out.Keys = append(out.Keys, KeyringKey{ID: fsm.KeyID(k), Signs: i == 0})
	}
	writeJSONOK(w, out)
	return nil
}
