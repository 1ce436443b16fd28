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

// A command stickyd does not know is named before the usage, and the exit
// code is cli's 127 (a shell's "command not found"); a word under a parent
// command is named too, with that parent's usage.
func TestUnknownCommandIsNamed(t *testing.T) {
	tests := []struct {
		args  []string
		code  int
		first string
		usage string
	}{
		{[]string{"frobnicate"}, 127, `unknown command "frobnicate"`, "Usage: stickyd"},
		{[]string{"frobnicate", "-x", "y"}, 127, `unknown command "frobnicate"`, "Usage: stickyd"},
		{[]string{"user", "frobnicate"}, 1, `unknown command "user frobnicate"`, "Usage: stickyd user <subcommand>"},
		{[]string{"operator", "raft", "frob"}, 1, `unknown command "operator raft frob"`, "Usage: stickyd operator raft <subcommand>"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			ui := cli.NewMockUi()
			code := RunWith(tt.args, ui, nil)
			stderr := ui.ErrorWriter.String()
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tt.code, stderr)
			}
			if !strings.HasPrefix(stderr, tt.first+"\n") {
				t.Fatalf("stderr does not start with %q:\n%s", tt.first, stderr)
			}
			if !strings.Contains(stderr, tt.usage) {
				t.Fatalf("stderr lacks the usage %q:\n%s", tt.usage, stderr)
			}
		})
	}
	// A parent alone is not an unknown command: its list, nothing named.
	ui := cli.NewMockUi()
	RunWith([]string{"user"}, ui, nil)
	if strings.Contains(ui.ErrorWriter.String(), "unknown command") {
		t.Fatalf("stickyd user: %s", ui.ErrorWriter.String())
	}
}

// stickyd --version, -v and stickyd version print the same line.
func TestVersionFlagMatchesCommand(t *testing.T) {
	ui := cli.NewMockUi()
	if code := RunWith([]string{"version"}, ui, nil); code != 0 {
		t.Fatalf("version: exit %d", code)
	}
	want := ui.OutputWriter.String()
	if !strings.HasPrefix(want, "stickyd v"+Version+" (") {
		t.Fatalf("version printed %q", want)
	}
	for _, flag := range []string{"--version", "-version", "-v"} {
		ui := cli.NewMockUi()
		if code := RunWith([]string{flag}, ui, nil); code != 0 {
			t.Fatalf("%s: exit %d", flag, code)
		}
		if got := ui.OutputWriter.String(); got != want {
			t.Fatalf("%s printed %q, version %q", flag, got, want)
		}
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
