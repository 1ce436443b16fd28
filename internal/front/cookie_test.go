package front

import (
	"strings"
	"testing"
)

func TestCookieSignVerify(t *testing.T) {
	s := newSigner([]byte(strings.Repeat("k", 32)))
	other := newSigner([]byte(strings.Repeat("K", 32)))
	v := s.sign("conn-1")
	if name, ok := s.verify(v); !ok || name != "conn-1" {
		t.Fatalf("verify(sign) = %q %v", name, ok)
	}
	mac := v[strings.LastIndexByte(v, '.'):]
	for what, bad := range map[string]string{
		"other key":      other.sign("conn-1"),
		"renamed":        "conn-2" + mac,
		"flipped MAC":    v[:len(v)-1] + string(v[len(v)-1]^1),
		"no MAC":         "conn-1",
		"empty name":     mac,
		"not base64 MAC": "conn-1.!!!",
		"empty":          "",
	} {
		if name, ok := s.verify(bad); ok {
			t.Errorf("%s: %q verified as %q", what, bad, name)
		}
	}
}
