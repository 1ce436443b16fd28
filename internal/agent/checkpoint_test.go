package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCheckpointInterval(t *testing.T) {
	tests := []struct {
		name, setting string
		want          time.Duration
		err           bool
	}{
		{"default", "", DefaultCheckpointInterval, false},
		{"off", "off", 0, false},
		{"zero", "0s", 0, false},
		{"bare zero", "0", 0, false},
		{"set", "1500ms", 1500 * time.Millisecond, false},
		{"too often", "10ms", 0, true},
		{"negative", "-1s", 0, true},
		{"not a duration", "often", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "group \"web\" {\n  builtin = \"demo\"\n"
			if tt.setting != "" {
				src += "  checkpoint_interval = \"" + tt.setting + "\"\n"
			}
			src += "}\n"
			c, err := ParseConfig("test.hcl", []byte(src))
			if tt.err {
				if err == nil || !strings.Contains(err.Error(), "checkpoint_interval") {
					t.Fatalf("%q accepted, or refused without saying why: %v", tt.setting, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a := &Agent{cfg: c}
			if got := a.checkpointInterval("web"); got != tt.want {
				t.Fatalf("interval %v, want %v", got, tt.want)
			}
		})
	}
	// A catalog group (no block here) checkpoints at the default.
	if got := (&Agent{cfg: &Config{}}).checkpointInterval("catalog"); got != DefaultCheckpointInterval {
		t.Fatalf("a catalog group's interval: %v", got)
	}
}

// The journal keeps one whole record per worker; a removed one is gone, and
// a write a crash cut short is neither read nor left behind.
func TestCheckpointFileJournal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkpoints")
	j := &fileJournal{dir: dir}
	if got, err := j.Load(); err != nil || len(got) != 0 {
		t.Fatalf("an empty journal: %v %v", got, err)
	}
	if err := j.Save("s1.web-1", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := j.Save("s1.web-2", []byte(`{"b":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := j.Save("s1.web-1", []byte(`{"a":3}`)); err != nil {
		t.Fatal(err)
	}
	if err := j.Save("s1.web-2", nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp-cut"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := j.Load()
	if err != nil || len(got) != 1 || string(got["s1.web-1"]) != `{"a":3}` {
		t.Fatalf("loaded %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-cut")); !os.IsNotExist(err) {
		t.Fatalf("a cut write was left behind: %v", err)
	}
}
