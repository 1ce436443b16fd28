package front

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
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

// macIssued is the MAC of a cookie that carries its issue time (unix
// seconds, decimal). Its domain differs from the older cookies' (mac), so
// neither form can be passed off as the other.
func macIssued(key []byte, name, issued string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("stickyd-conn-issued:"))
	m.Write([]byte(name))
	m.Write([]byte{0})
	m.Write([]byte(issued))
	return m.Sum(nil)
}

// sign signs name, issued at the given time, with the ring's first key:
// name "." issued "." MAC.
func (r *keyRing) sign(name string, issued time.Time) string {
	at := strconv.FormatInt(issued.Unix(), 10)
	return name + "." + at + "." + base64.RawURLEncoding.EncodeToString(macIssued(r.keys[0], name, at))
}

// verify returns the connection a cookie value names, when it was issued
// and the position in the ring of the key that signed it (0: the signing
// key); ok is false when no key of the ring signed it. A value in the
// older form, name "." MAC, verifies with a zero issue time: it is renewed
// at once. The MAC is compared in its encoded form, so only the exact value
// sign made is accepted (a decoder would let other spellings of the same
// bytes through). Every key is tried, whichever matches, so the time taken
// does not say which one did.
func (r *keyRing) verify(value string) (name string, issued time.Time, key int, ok bool) {
	i := strings.LastIndexByte(value, '.')
	if i <= 0 {
		return "", time.Time{}, 0, false
	}
	rest, sig := value[:i], []byte(value[i+1:])
	if j := strings.LastIndexByte(rest, '.'); j > 0 {
		if at, err := strconv.ParseInt(rest[j+1:], 10, 64); err == nil && at > 0 && rest[j+1] != '0' {
			n := rest[:j]
			if k := r.match(sig, func(kb []byte) []byte { return macIssued(kb, n, rest[j+1:]) }); k >= 0 {
				return n, time.Unix(at, 0), k, true
			}
		}
	}
	if k := r.match(sig, func(kb []byte) []byte { return mac(kb, rest) }); k >= 0 {
		return rest, time.Time{}, k, true
	}
	return "", time.Time{}, 0, false
}

// match is the position of the first key whose MAC (by sum) is sig, or -1.
func (r *keyRing) match(sig []byte, sum func([]byte) []byte) int {
	key := -1
	for k, kb := range r.keys {
		want := base64.RawURLEncoding.EncodeToString(sum(kb))
		if hmac.Equal(sig, []byte(want)) && key < 0 {
			key = k
		}
	}
	return key
}
