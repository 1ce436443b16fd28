package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
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

// Where the keys a server brings come from: the ring's files in order
// (none created), else one key file created on first start and read after,
// else an older version's <data_dir>/cookie.key, else none (the cluster's
// ring, made by its leader, is all there is).
func TestConfiguredRing(t *testing.T) {
	dir := t.TempDir()
	write := func(name, key string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(key), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey, oldKey := strings.Repeat("n", 32), strings.Repeat("o", 44)
	newPath, oldPath := write("new.key", newKey), write("old.key", oldKey)
	shortPath := write("short.key", "too short")
	keys := func(f *FrontConfig, dataDir string) ([][]byte, string, error) {
		return (&Agent{cfg: &Config{Front: f, DataDir: dataDir}, ranBefore: ranBefore(dataDir)}).configuredRing()
	}

	got, src, err := keys(&FrontConfig{CookieKeyFiles: []string{newPath, oldPath}}, "")
	if err != nil || len(got) != 2 || string(got[0]) != newKey || string(got[1]) != oldKey || src != ringFromFiles {
		t.Fatalf("ring: %q %s %v", got, src, err)
	}
	missing := filepath.Join(dir, "missing.key")
	if _, _, err := keys(&FrontConfig{CookieKeyFiles: []string{missing, oldPath}}, ""); err == nil || !strings.Contains(err.Error(), "missing.key") {
		t.Fatalf("a missing ring file: %v", err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatal("a missing ring file was created")
	}
	if _, _, err := keys(&FrontConfig{CookieKeyFiles: []string{newPath, shortPath}}, ""); err == nil || !strings.Contains(err.Error(), "needs at least 32") {
		t.Fatalf("a short ring key: %v", err)
	}

	// cookie_key_file: created on a first start, read after; missing on a
	// server that ran before, refused.
	data := t.TempDir()
	created := filepath.Join(dir, "created.key")
	first, src, err := keys(&FrontConfig{CookieKeyFile: created}, data)
	if err != nil || len(first) != 1 || len(first[0]) != 32 || src != ringFromFiles {
		t.Fatalf("created key: %q %v", first, err)
	}
	if again, _, err := keys(&FrontConfig{CookieKeyFile: created}, data); err != nil || !bytes.Equal(again[0], first[0]) {
		t.Fatal("the key file changed across starts")
	}
	if err := os.MkdirAll(filepath.Join(data, "raft"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "raft", "raft.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(created)
	if _, _, err := keys(&FrontConfig{CookieKeyFile: created}, data); err == nil || !strings.Contains(err.Error(), "has run before") {
		t.Fatalf("a deleted key on a server that ran before: %v", err)
	}
	if _, _, err := keys(&FrontConfig{CookieKeyFile: shortPath}, ""); err == nil {
		t.Fatal("a short cookie_key_file was taken")
	}
	// No files: an older version's data-dir key seeds, or nothing.
	if got, src, err := keys(&FrontConfig{}, data); got != nil || src != "" || err != nil {
		t.Fatalf("no files: %q %s %v", got, src, err)
	}
	write("legacy.key", newKey)
	if err := os.Rename(filepath.Join(dir, "legacy.key"), filepath.Join(data, "cookie.key")); err != nil {
		t.Fatal(err)
	}
	if got, src, err := keys(&FrontConfig{}, data); err != nil || string(got[0]) != newKey || src != ringFromLegacy {
		t.Fatalf("legacy key: %q %s %v", got, src, err)
	}
}

// A leader seeds the ring when there is none and installs files that keep
// the ring's first key; a front with files signs with the ring's first key
// and verifies with both, and refuses files sharing no key with it.
func TestRingRules(t *testing.T) {
	k := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	if req := ringToInstall(nil, nil, ""); req == nil || len(req.Keys) != 1 || len(req.Keys[0]) != 32 || req.Source != fsm.RingGenerated || req.Expect != "" {
		t.Fatalf("seed with nothing: %+v", req)
	}
	if req := ringToInstall(nil, [][]byte{k(1)}, ringFromLegacy); req == nil || !bytes.Equal(req.Keys[0], k(1)) {
		t.Fatalf("seed from an older version's key: %+v", req)
	}
	ring := &fsm.CookieRing{Keys: [][]byte{k(1)}, Source: fsm.RingFiles}
	if req := ringToInstall(ring, [][]byte{k(2), k(1)}, ringFromFiles); req == nil || req.Expect != fsm.RingID(ring.Keys) || !bytes.Equal(req.Keys[0], k(2)) {
		t.Fatalf("rotated files: %+v", req)
	}
	for _, mine := range [][][]byte{{k(1)}, {k(3)}, nil} {
		if req := ringToInstall(ring, mine, ringFromFiles); req != nil {
			t.Fatalf("files %s installed over %s", fsm.RingID(mine), fsm.RingID(ring.Keys))
		}
	}
	if req := ringToInstall(ring, [][]byte{k(2)}, ringFromLegacy); req != nil {
		t.Fatal("a legacy key replaced the cluster's ring")
	}
	keys, differs, err := ringInForce(ring, [][]byte{k(2), k(1)}, ringFromFiles)
	if err != nil || !differs || len(keys) != 2 || !bytes.Equal(keys[0], k(1)) || !bytes.Equal(keys[1], k(2)) {
		t.Fatalf("files ahead of the ring: %s %v %v", fsm.RingID(keys), differs, err)
	}
	if _, _, err := ringInForce(ring, [][]byte{k(3)}, ringFromFiles); err == nil || !strings.Contains(err.Error(), "share no key") {
		t.Fatalf("a damaged key file: %v", err)
	}
	if keys, differs, err := ringInForce(ring, [][]byte{k(3)}, ringFromLegacy); err != nil || differs || fsm.RingID(keys) != fsm.RingID(ring.Keys) {
		t.Fatal("a legacy key is not the ring")
	}
}

// The front's connection bound: as configured, or the file limit less
// what the process keeps for itself.
func TestFrontConnectionsBound(t *testing.T) {
	if n, _ := frontConnections(500); n != 500 {
		t.Fatalf("configured 500, got %d", n)
	}
	n, files := frontConnections(0)
	if files == 0 {
		t.Skip("no file limit to derive from on this system")
	}
	reserve := min(max(files/5, 256), 10000)
	if uint64(n) != files-reserve {
		t.Fatalf("file limit %d: bound %d, want %d", files, n, files-reserve)
	}
}
