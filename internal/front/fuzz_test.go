package front

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// A cookie value from outside: verify never panics, and it accepts only
// what the key signed.
func FuzzCookieVerify(f *testing.F) {
	s := newSigner([]byte("0123456789abcdef0123456789abcdef"))
	f.Add(s.sign("conn-1"))
	f.Add("conn-1.")
	f.Add("")
	f.Add(".....")
	f.Add(strings.Repeat("a", 300) + "." + strings.Repeat("b", 44))
	f.Fuzz(func(t *testing.T, value string) {
		name, ok := s.verify(value)
		if ok && s.sign(name) != value {
			t.Fatalf("accepted %q as %q, which signs as %q", value, name, s.sign(name))
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
