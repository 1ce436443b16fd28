package front

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// MinCookieKeyBytes is the shortest key the cookie key ring takes.
const MinCookieKeyBytes = 32

// keyRing signs connection names into cookie values, name "." MAC, with
// HMAC-SHA256 under its first key, and verifies them with every key it
// holds. A rotation puts a new key first and keeps the old one behind it,
// so the cookies already given out still verify and nobody is logged out; a
// value no key of the ring verifies (tampered, forged, or signed by a key
// since dropped from the ring) names nobody.
type keyRing struct{ keys [][]byte }

// newKeyRing checks and copies keys: at least one, each at least
// MinCookieKeyBytes long, no two the same.
func newKeyRing(keys [][]byte) (*keyRing, error) {
	if len(keys) == 0 {
		return nil, errors.New("the cookie key ring is empty: give at least one key")
	}
	r := &keyRing{}
	for i, k := range keys {
		if len(k) < MinCookieKeyBytes {
			return nil, fmt.Errorf("cookie key %d of the ring holds %d bytes; it needs at least %d", i+1, len(k), MinCookieKeyBytes)
		}
		for j, prev := range r.keys {
			if bytes.Equal(prev, k) {
				return nil, fmt.Errorf("cookie keys %d and %d of the ring are the same key", j+1, i+1)
			}
		}
		r.keys = append(r.keys, bytes.Clone(k))
	}
	return r, nil
}

func mac(key []byte, name string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("stickyd-conn:"))
	m.Write([]byte(name))
	return m.Sum(nil)
}

// sign signs name with the ring's first key.
func (r *keyRing) sign(name string) string {
	return name + "." + base64.RawURLEncoding.EncodeToString(mac(r.keys[0], name))
}

// verify returns the connection a cookie value names and the position in
// the ring of the key that signed it (0: the signing key); ok is false when
// no key of the ring signed it. The MAC is compared in its encoded form, so
// only the exact value sign made is accepted (a decoder would let other
// spellings of the same bytes through). Every key is tried, whichever
// matches, so the time taken does not say which one did.
func (r *keyRing) verify(value string) (name string, key int, ok bool) {
	i := strings.LastIndexByte(value, '.')
	if i <= 0 {
		return "", 0, false
	}
	name, sig := value[:i], []byte(value[i+1:])
	key = -1
	for k, kb := range r.keys {
		want := base64.RawURLEncoding.EncodeToString(mac(kb, name))
		if hmac.Equal(sig, []byte(want)) && key < 0 {
			key = k
		}
	}
	if key < 0 {
		return "", 0, false
	}
	return name, key, true
}
