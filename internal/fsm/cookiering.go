package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// The cookie key ring is the cluster's: every front signs connection
// cookies with its first key and verifies them with all of them, so a
// person keeps one identity through every front. It lives in the maps (and
// so in raft's log and snapshots, on the servers' disks and on the raft
// port, which mutual TLS guards); nothing but its key ids ever leaves them.

// CookieRingRequestType installs a cookie key ring.
const CookieRingRequestType MessageType = 24

// Bounds of a cookie key ring.
const (
	// MinCookieKeyBytes is the shortest key a ring takes.
	MinCookieKeyBytes = 32
	// MaxCookieKeys is the most keys a ring holds.
	MaxCookieKeys = 8
)

// Where a ring came from.
const (
	// RingGenerated: a leader made it (the first start, a rotation).
	RingGenerated = "generated"
	// RingFiles: read from the servers' cookie_key_files / cookie_key_file.
	RingFiles = "files"
)

// ErrRingChanged refuses a ring installed over another than the one its
// writer read: someone else changed the ring meanwhile.
var ErrRingChanged = errors.New("the cookie key ring changed meanwhile; read it again")

// CookieRing is the cluster's cookie key ring.
type CookieRing struct {
	// Keys: the first signs, every one verifies.
	Keys [][]byte `json:"keys"`
	// Source is RingGenerated or RingFiles.
	Source string `json:"source"`
	// Index is the log index that installed it.
	Index uint64 `json:"index"`
}

// CookieRingRequest installs Keys as the ring if the ring in the maps is
// still the one whose RingID is Expect ("": no ring yet).
type CookieRingRequest struct {
	Keys   [][]byte `json:"keys"`
	Source string   `json:"source"`
	Expect string   `json:"expect"`
}

// KeyID names a cookie key without saying anything of it: the first 8
// bytes of its SHA-256 under a domain of its own, in hex.
func KeyID(key []byte) string {
	h := sha256.New()
	h.Write([]byte("stickyd-cookie-key-id:"))
	h.Write(key)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// RingID names a ring: its key ids in order, joined by commas ("" for no
// ring).
func RingID(keys [][]byte) string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = KeyID(k)
	}
	return strings.Join(ids, ",")
}

// CheckRing checks a ring's keys: one to MaxCookieKeys, each at least
// MinCookieKeyBytes, no two the same.
func CheckRing(keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("the cookie key ring is empty: give at least one key")
	}
	if len(keys) > MaxCookieKeys {
		return fmt.Errorf("the cookie key ring holds %d keys; it holds at most %d", len(keys), MaxCookieKeys)
	}
	for i, k := range keys {
		if len(k) < MinCookieKeyBytes {
			return fmt.Errorf("cookie key %d of the ring holds %d bytes; it needs at least %d", i+1, len(k), MinCookieKeyBytes)
		}
		for j := range i {
			if bytes.Equal(keys[j], k) {
				return fmt.Errorf("cookie keys %d and %d of the ring are the same key", j+1, i+1)
			}
		}
	}
	return nil
}

func (f *FSM) applyCookieRing(buf body, index uint64) interface{} {
	var req CookieRingRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding a cookie key ring: %w", err)
	}
	if err := CheckRing(req.Keys); err != nil {
		return err
	}
	var current string
	if r := f.state.CookieRing; r != nil {
		current = RingID(r.Keys)
	}
	if current != req.Expect {
		return ErrRingChanged
	}
	f.state.CookieRing = &CookieRing{Keys: req.Keys, Source: req.Source, Index: index}
	if f.ringCh != nil {
		close(f.ringCh)
		f.ringCh = nil
	}
	return nil
}

// CookieRing returns a copy of the cluster's cookie key ring, or nil
// before one is installed.
func (f *FSM) CookieRing() *CookieRing {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.CookieRing.clone()
}

// WatchCookieRing returns a channel closed at the next change of the
// cookie key ring (or a snapshot restore).
func (f *FSM) WatchCookieRing() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ringCh == nil {
		f.ringCh = make(chan struct{})
	}
	return f.ringCh
}

func (r *CookieRing) clone() *CookieRing {
	if r == nil {
		return nil
	}
	c := *r
	c.Keys = make([][]byte, len(r.Keys))
	for i, k := range r.Keys {
		c.Keys[i] = bytes.Clone(k)
	}
	return &c
}
