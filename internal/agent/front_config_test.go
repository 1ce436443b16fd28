package agent

import (
	"strings"
	"testing"
	"time"
)

func TestParseFrontSecurity(t *testing.T) {
	src := `
front {
  cookie_key_files = ["/etc/stickyd/cookie-2.key", "/etc/stickyd/cookie-1.key"]
  frame_rate       = 200
  frame_burst      = 400
  cookie_ttl       = "8h"
}
`
	c, err := ParseConfig("test.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	f := c.Front
	if len(f.CookieKeyFiles) != 2 || f.CookieKeyFiles[0] != "/etc/stickyd/cookie-2.key" || f.FrameRate != 200 || f.FrameBurst != 400 || duration(f.CookieTTL) != 8*time.Hour {
		t.Fatalf("front %+v", f)
	}
	// The defaults: one key file (or the data dir's), no rate limit.
	c, err = ParseConfig("test.hcl", []byte(`front { address = "127.0.0.1:0" }`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Front.FrameRate != 0 || c.Front.FrameBurst != 0 || len(c.Front.CookieKeyFiles) != 0 {
		t.Fatalf("defaults %+v", c.Front)
	}
	if c.Front.newcomerRate() != 0 {
		t.Fatalf("default newcomer rate %v, want 0 (the front's default)", c.Front.newcomerRate())
	}
	off, err := ParseConfig("test.hcl", []byte(`front { newcomer_rate = 0 }`))
	if err != nil || off.Front.newcomerRate() >= 0 {
		t.Fatalf("newcomer_rate = 0: %v %v, want the limit off", err, off.Front.newcomerRate())
	}
	if c.Front.idleTimeout() != DefaultIdleTimeout || c.Front.bodyTimeout() != DefaultBodyTimeout || c.Front.maxHeaderBytes() != DefaultMaxHeaderBytes {
		t.Fatalf("default bounds %v %v %d", c.Front.idleTimeout(), c.Front.bodyTimeout(), c.Front.maxHeaderBytes())
	}
}

func TestParseFrontSecurityErrors(t *testing.T) {
	for _, tt := range []struct{ name, src, want string }{
		{"file and ring", "front {\n cookie_key_file = \"/a\"\n cookie_key_files = [\"/b\"]\n}", "not both"},
		{"ring twice", "front { cookie_key_files = [\"/a\", \"/b\", \"/a\"] }", "lists /a twice"},
		{"empty ring entry", "front { cookie_key_files = [\"\"] }", "cookie_key_files[0] is empty"},
		{"negative rate", "front { frame_rate = -1 }", "must not be negative"},
		{"negative burst", "front {\n frame_rate = 5\n frame_burst = -1\n}", "must not be negative"},
		{"burst alone", "front { frame_burst = 10 }", "set frame_rate too"},
		{"short cookie life", "front { cookie_ttl = \"30s\" }", "at least \"1m\""},
		{"short idle timeout", "front { idle_timeout = \"10ms\" }", "idle_timeout \"10ms\""},
		{"bad body timeout", "front { body_timeout = \"soon\" }", "body_timeout \"soon\""},
		{"tiny header bound", "front { max_header_bytes = 100 }", "at least 4096"},
		{"negative connections", "front { max_connections = -1 }", "max_connections = -1"},
		{"negative newcomer rate", "front { newcomer_rate = -5 }", "newcomer_rate = 0 turns"},
		{"bad cookie life", "front { cookie_ttl = \"a day\" }", "cookie_ttl \"a day\""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("test.hcl", []byte(tt.src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}
