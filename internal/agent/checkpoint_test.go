package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/host"
)

// A group's checkpoint_interval reaches its workers, or is refused
// saying which setting is wrong.
func TestCheckpointInterval(t *testing.T) {
	tests := []struct {
		name, setting string
		want          time.Duration
		err           bool
	}{
		// The setting's parsing is host.ParseCheckpointInterval's (its
		// own test has every case); these check the group block uses it.
		{"default", "", host.DefaultCheckpointInterval, false},
		{"off", "off", 0, false},
		{"set", "1500ms", 1500 * time.Millisecond, false},
		{"too often", "10ms", 0, true},
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
	if got := (&Agent{cfg: &Config{}}).checkpointInterval("catalog"); got != host.DefaultCheckpointInterval {
		t.Fatalf("a catalog group's interval: %v", got)
	}
}
