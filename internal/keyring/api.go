package keyring

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
)

// Key is one key of the cookie key ring as the API shows it: its id and
// whether it signs. Keys themselves never leave the maps.
type Key struct {
	ID    string `json:"id"`
	Signs bool   `json:"signs"`
}

// Ring is GET /v1/operator/keyring (and the answer of a rotation).
type Ring struct {
	// Keys is the cluster's ring, in the maps; Source where it came from
	// (generated, files) and Index the log index that installed it.
	Keys   []Key  `json:"keys"`
	Source string `json:"source"`
	Index  uint64 `json:"index"`
	// Files are the ids of this server's cookie key files, if it has any.
	Files []string `json:"files,omitempty"`
}

// keepOnRotate is how many earlier keys a rotation keeps behind the new
// one: cookies signed with them still verify (and are renewed at once).
const keepOnRotate = 3

// Routes serves GET /v1/operator/keyring (the ring's key ids) and POST
// /v1/operator/keyring/rotate on mux, each handler wrapped by wrap (the
// admin API's errors and token).
func (k *Keeper) Routes(mux *http.ServeMux, wrap func(func(http.ResponseWriter, *http.Request) error) http.HandlerFunc) {
	mux.HandleFunc("GET /v1/operator/keyring", wrap(k.list))
	mux.HandleFunc("POST /v1/operator/keyring/rotate", wrap(k.rotate))
}

func (k *Keeper) list(w http.ResponseWriter, r *http.Request) error {
	ring := k.cfg.Maps.CookieRing()
	if ring == nil {
		return &api.Error{Status: http.StatusServiceUnavailable, Message: "the cluster has no cookie key ring yet (its leader makes it at the first start); retry"}
	}
	out := Ring{Source: ring.Source, Index: ring.Index}
	for i, key := range ring.Keys {
		out.Keys = append(out.Keys, Key{ID: fsm.KeyID(key), Signs: i == 0})
	}
	if k.cfg.Mine.source == fromFiles {
		for _, key := range k.cfg.Mine.keys {
			out.Files = append(out.Files, fsm.KeyID(key))
		}
	}
	writeJSONOK(w, out)
	return nil
}

// rotate has the leader put a new random key first in the ring, the
// earlier ones behind it (drop_old: none, which logs everyone out: for a
// key that leaked). A follower forwards the call; the new key is made on
// the leader and travels only in raft.
func (k *Keeper) rotate(w http.ResponseWriter, r *http.Request) error {
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
	if !k.cfg.Leader.IsLeader() {
		return k.cfg.Forward(w, r, body)
	}
	ring := k.cfg.Maps.CookieRing()
	switch {
	case ring == nil:
		return &api.Error{Status: http.StatusServiceUnavailable, Message: "the cluster has no cookie key ring yet; retry"}
	case ring.Source == fsm.RingFiles:
		return &api.Error{Status: http.StatusConflict, Message: "the cluster's cookie key ring comes from the servers' cookie_key_files: " +
			"rotate the files (a new key first, the old one behind it) on every server, then restart them, the leader last (docs/security.md)"}
	}
	keys := [][]byte{newKey()}
	if !req.DropOld {
		keys = append(keys, ring.Keys[:min(len(ring.Keys), keepOnRotate)]...)
	}
	entry, err := fsm.Encode(fsm.CookieRingRequestType, fsm.CookieRingRequest{Keys: keys, Source: fsm.RingGenerated, Expect: fsm.RingID(ring.Keys)})
	if err != nil {
		return err
	}
	if _, err := k.cfg.Log.Apply(r.Context(), entry); err != nil {
		if errors.Is(err, fsm.ErrRingChanged) {
			return &api.Error{Status: http.StatusConflict, Message: "the ring changed meanwhile (another rotation); list it and retry"}
		}
		return &api.Error{Status: http.StatusServiceUnavailable, Message: "writing the new ring: " + err.Error()}
	}
	k.log.Info("rotated the cookie key ring", "keys", fsm.RingID(keys), "dropped_old", req.DropOld)
	out := Ring{Source: fsm.RingGenerated}
	for i, key := range keys {
		out.Keys = append(out.Keys, Key{ID: fsm.KeyID(key), Signs: i == 0})
	}
	writeJSONOK(w, out)
	return nil
}

func writeJSONOK(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
