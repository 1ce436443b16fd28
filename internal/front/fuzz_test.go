package front

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// A cookie value from outside: verify never panics, and it accepts only
// what a key of the ring signed, naming that key.
func FuzzCookieVerify(f *testing.F) {
	older := mustRing(f, "fedcba9876543210fedcba9876543210")
	current := mustRing(f, "0123456789abcdef0123456789abcdef")
	ring := mustRing(f, "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210")
	dropped := mustRing(f, "a dropped key, never in the ring, 32+")
	f.Add(current.sign("conn-1", "", issuedAt))
	f.Add(older.sign("conn-1", "", issuedAt))
	f.Add(dropped.sign("conn-1", "", issuedAt))
	f.Add(legacySign(current, "conn-1"))
	f.Add("conn-1.")
	f.Add("")
	f.Add(".....")
	f.Add(strings.Repeat("a", 300) + "." + strings.Repeat("b", 44))
	f.Fuzz(func(t *testing.T, value string) {
		name, at, key, ok := ring.check(value)
		if !ok {
			return
		}
		// What each ring would sign for this name and time.
		signed := func(r *keyRing) string {
			if at.IsZero() {
				return legacySign(r, name)
			}
			return r.sign(name, "", at)
		}
		switch key {
		case 0:
			if signed(current) != value {
				t.Fatalf("accepted %q as %q by the first key, which signs it as %q", value, name, signed(current))
			}
		case 1:
			if signed(older) != value {
				t.Fatalf("accepted %q as %q by the older key, which signs it as %q", value, name, signed(older))
			}
		default:
			t.Fatalf("accepted %q by key %d of a ring of 2", value, key)
		}
		if signed(dropped) == value {
			t.Fatalf("accepted %q, signed by a key outside the ring", value)
		}
	})
}

// A client's op (a WebSocket message or a POST /_stickyd/op body): decoding
// and checking it never panics; a refusal is a 400 with a message.
func FuzzOp(f *testing.F) {
	for _, s := range []string{
		`{"op":"open","id":1,"page":"p","kind":"counter"}`,
		`{"op":"msg","id":2,"page":"p","data":{"op":"inc"}}`,
		`{"op":"pull","id":3,"page":"p","after":4,"wait":25000}`,
		`{"op":"close","id":4,"page":"p"}`,
		`{"op":"msg","page":""}`, `{"op":"pull","page":"p","wait":-1}`, `[]`, `null`, `{"op":7}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var o op
		if err := json.Unmarshal(b, &o); err != nil {
			return
		}
		fr, _, err := o.frame()
		var he *HTTPError
		switch {
		case err != nil && (!errors.As(err, &he) || he.Status != 400 || he.Message == ""):
			t.Fatalf("op %s: refused without a 400 and a message: %v", b, err)
		case err == nil && fr == nil:
			t.Fatalf("op %s: no frame and no error", b)
		}
	})
}
