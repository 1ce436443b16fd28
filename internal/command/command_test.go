package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/cli"
)

func TestCommandLine(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.hcl")
	if err := os.WriteFile(bad, []byte("group \"g\" {\n  workers = \"many\"\n  builtin = \"demo\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"version"}, 0, "channel protocol 1", ""},
		{[]string{"version", "extra"}, 1, "", "no arguments"},
		{[]string{"agent"}, 1, "", "-config is required"},
		{[]string{"agent", "-config", "/nonexistent.hcl"}, 1, "", "reading config"},
		{[]string{"agent", "-config", bad}, 1, "", "bad.hcl:2"},
		{[]string{"agent", "-nope"}, 1, "", "Usage: stickyd agent"},
		{[]string{"dev", "-workers", "0"}, 1, "", "want 1 to 256"},
		{[]string{"dev", "-log-level", "loud"}, 1, "", "unknown log level"},
		{[]string{"dev", "stray"}, 1, "", "unexpected arguments"},
		{[]string{"dev"}, 1, "", "no application compiled in"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			ui := cli.NewMockUi()
			if code := RunWith(tt.args, ui, nil); code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tt.code, ui.ErrorWriter.String())
			}
			if !strings.Contains(ui.OutputWriter.String(), tt.out) {
				t.Fatalf("stdout %q lacks %q", ui.OutputWriter.String(), tt.out)
			}
			if !strings.Contains(ui.ErrorWriter.String(), tt.err) {
				t.Fatalf("stderr %q lacks %q", ui.ErrorWriter.String(), tt.err)
			}
		})
	}
}

func TestDevConfigIsValid(t *testing.T) {
	for _, plugin := range []string{"", "/bin/demo-worker"} {
		c := DevConfig("127.0.0.1:0", 3, plugin)
		if err := c.Finish(); err != nil {
			t.Fatalf("dev config (plugin %q): %v", plugin, err)
		}
		if c.DataDir != "" {
			t.Fatal("dev writes to disk")
		}
	}
}
