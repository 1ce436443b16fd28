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

	"github.com/stickyd/stickyd/plugins/worker/protocol"
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

// macUser is the MAC of a cookie bound to the person its connection
// belongs to: the connection's name, that person's user key and the issue
// time. The user key is not in the value; the front reads it from the maps.
// So when the connection's person changes (a login, a login as someone
// else) every cookie issued before names nobody: a cookie planted in a
// victim's browser before their login is worth nothing after it (session
// fixation), and the login's answer carries the new one.
func macUser(key []byte, name, user, issued string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("stickyd-conn-user:"))
	m.Write([]byte(name))
	m.Write([]byte{0})
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(issued))
	return m.Sum(nil)
}

// userKey is the key a cookie of conn is bound to: user, or the
// connection's own anonymous key when user is "".
func userKey(conn, user string) string {
	if user == "" {
		return protocol.AnonymousUser(conn)
	}
	return user
}

// sign signs name, bound to user ("": the connection's anonymous key) and
// issued at the given time, with the ring's first key: name "." issued "."
// MAC.
func (r *keyRing) sign(name, user string, issued time.Time) string {
	at := strconv.FormatInt(issued.Unix(), 10)
	return name + "." + at + "." + base64.RawURLEncoding.EncodeToString(macUser(r.keys[0], name, userKey(name, user), at))
}

// nameOf is the connection name a cookie value claims, unverified.
func nameOf(value string) string {
	i := strings.LastIndexByte(value, '.')
	if i <= 0 {
		return ""
	}
	rest := value[:i]
	if j := strings.LastIndexByte(rest, '.'); j > 0 {
		if _, err := strconv.ParseInt(rest[j+1:], 10, 64); err == nil {
			return rest[:j]
		}
	}
	return rest
}

// verify returns the connection a cookie value names, when it was issued
// and the position in the ring of the key that signed it (0: the signing
// key); ok is false when no key of the ring signed it for the person
// userOf says the connection belongs to now ("": its anonymous key).
// legacy marks a value in a form older versions issued, not bound to a
// person: name "." issued "." MAC, or name "." MAC with a zero issue time;
// they verify until they expire and are renewed at once. The MAC is
// compared in its encoded form, so only the exact value sign made is
// accepted (a decoder would let other spellings of the same bytes
// through). Every key is tried, whichever matches, so the time taken does
// not say which one did.
func (r *keyRing) verify(value string, userOf func(name string) string) (name string, issued time.Time, key int, legacy, ok bool) {
	i := strings.LastIndexByte(value, '.')
	if i <= 0 {
		return "", time.Time{}, 0, false, false
	}
	rest, sig := value[:i], []byte(value[i+1:])
	if j := strings.LastIndexByte(rest, '.'); j > 0 {
		if at, err := strconv.ParseInt(rest[j+1:], 10, 64); err == nil && at > 0 && rest[j+1] != '0' {
			n, stamp := rest[:j], rest[j+1:]
			user := userKey(n, userOf(n))
			if k := r.match(sig, func(kb []byte) []byte { return macUser(kb, n, user, stamp) }); k >= 0 {
				return n, time.Unix(at, 0), k, false, true
			}
			if k := r.match(sig, func(kb []byte) []byte { return macIssued(kb, n, stamp) }); k >= 0 {
				return n, time.Unix(at, 0), k, true, true
			}
		}
	}
	if k := r.match(sig, func(kb []byte) []byte { return mac(kb, rest) }); k >= 0 {
		return rest, time.Time{}, k, true, true
	}
	return "", time.Time{}, 0, false, false
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
