package front

import (
	"bytes"
	"strings"
	"testing"
)

func mustRing(t testing.TB, keys ...string) *keyRing {
	t.Helper()
	var kb [][]byte
	for _, k := range keys {
		kb = append(kb, []byte(k))
	}
	r, err := newKeyRing(kb)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	keyA = strings.Repeat("a", 32)
	keyB = strings.Repeat("b", 32)
	keyC = strings.Repeat("c", 40)
)

func TestCookieSignVerify(t *testing.T) {
	s := mustRing(t, strings.Repeat("k", 32))
	other := mustRing(t, strings.Repeat("K", 32))
	v := s.sign("conn-1")
	if name, key, ok := s.verify(v); !ok || name != "conn-1" || key != 0 {
		t.Fatalf("verify(sign) = %q %d %v", name, key, ok)
	}
	mac := v[strings.LastIndexByte(v, '.'):]
	// 32 bytes take 43 base64 characters, the last 2 bits of which are
	// padding: a lenient decoder reads this other spelling as the same MAC.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	respelled := v[:len(v)-1] + string(alphabet[strings.IndexByte(alphabet, v[len(v)-1])^1])
	for what, bad := range map[string]string{
		"other spelling": respelled,
		"line break":     v + "\n",
		"other key":      other.sign("conn-1"),
		"renamed":        "conn-2" + mac,
		"flipped MAC":    v[:len(v)-1] + string(v[len(v)-1]^1),
		"no MAC":         "conn-1",
		"empty name":     mac,
		"not base64 MAC": "conn-1.!!!",
		"empty":          "",
	} {
		if name, _, ok := s.verify(bad); ok {
			t.Errorf("%s: %q verified as %q", what, bad, name)
		}
	}
}

// A rotation puts a new key first: new cookies are signed with it, the
// cookies signed before still verify (nobody is logged out), and once the
// old key leaves the ring its cookies name nobody.
func TestCookieKeyRotation(t *testing.T) {
	before := mustRing(t, keyA)
	old := before.sign("conn-old")

	// Phase 1: the new key is accepted everywhere before anyone signs with it.
	accepting := mustRing(t, keyA, keyB)
	if accepting.sign("conn-x") != before.sign("conn-x") {
		t.Fatal("a key added behind the first changed what the ring signs with")
	}
	// Phase 2: the new key signs; the old one still verifies.
	rotated := mustRing(t, keyB, keyA)
	fresh := rotated.sign("conn-new")
	if fresh == before.sign("conn-new") {
		t.Fatal("the rotated ring still signs with the old key")
	}
	if _, _, ok := before.verify(fresh); ok {
		t.Fatal("the old ring verified a cookie signed with a key it never had")
	}
	for _, tt := range []struct {
		what  string
		ring  *keyRing
		value string
		conn  string
		key   int
	}{
		{"old cookie, ring accepting the new key", accepting, old, "conn-old", 0},
		{"new cookie, ring accepting the new key", accepting, fresh, "conn-new", 1},
		{"old cookie after the rotation", rotated, old, "conn-old", 1},
		{"new cookie after the rotation", rotated, fresh, "conn-new", 0},
	} {
		t.Run(tt.what, func(t *testing.T) {
			name, key, ok := tt.ring.verify(tt.value)
			if !ok || name != tt.conn || key != tt.key {
				t.Fatalf("verify = %q key %d %v, want %q key %d", name, key, ok, tt.conn, tt.key)
			}
		})
	}

	// Phase 3: the old key is dropped; its cookies name nobody, the new
	// ones still do.
	dropped := mustRing(t, keyB, keyC)
	if name, _, ok := dropped.verify(old); ok {
		t.Fatalf("a cookie signed with a dropped key verified as %q", name)
	}
	if name, key, ok := dropped.verify(fresh); !ok || name != "conn-new" || key != 0 {
		t.Fatalf("the current key's cookie: %q %d %v", name, key, ok)
	}
}

func TestCookieKeyRingChecks(t *testing.T) {
	for _, tt := range []struct {
		what string
		keys [][]byte
		want string
	}{
		{"empty", nil, "empty"},
		{"short", [][]byte{[]byte(keyA), []byte("short")}, "key 2 of the ring holds 5 bytes"},
		{"duplicate", [][]byte{[]byte(keyA), []byte(keyB), []byte(keyA)}, "keys 1 and 3"},
	} {
		t.Run(tt.what, func(t *testing.T) {
			_, err := newKeyRing(tt.keys)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
	// The ring keeps its own copies: a caller reusing its buffer changes
	// nothing.
	buf := []byte(keyA)
	r, err := newKeyRing([][]byte{buf})
	if err != nil {
		t.Fatal(err)
	}
	v := r.sign("c")
	copy(buf, bytes.Repeat([]byte("z"), len(buf)))
	if _, _, ok := r.verify(v); !ok {
		t.Fatal("the ring shares the caller's key buffer")
	}
}
