package agent

import (
	"os"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	src := `
name     = "node-1"
data_dir = "/var/lib/stickyd"
server {
  bootstrap_expect = 1
  raft_addr        = "10.0.0.1:4647"
}
front {
  address       = "0.0.0.0:8080"
  frame_timeout = "5s"
}
group "web" {
  workers = 3
  plugin {
    command = "/usr/local/bin/demo-worker"
    args    = ["-x"]
    env     = { FOO = "bar" }
  }
}
group "beta" {
  builtin = "demo"
}
`
	c, err := ParseConfig("test.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "node-1" || c.Server.RaftAddr != "10.0.0.1:4647" || c.Front.frameTimeout().Seconds() != 5 {
		t.Fatalf("config %+v", c)
	}
	if len(c.Groups) != 2 || c.Groups[0].Workers != 3 || c.Groups[0].Plugin.Env["FOO"] != "bar" || c.Groups[1].Workers != 1 {
		t.Fatalf("groups %+v %+v", c.Groups[0], c.Groups[1])
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"syntax", `name = `, "test.hcl:1"},
		{"unknown field", "colour = \"red\"\ngroup \"g\" { builtin = \"demo\" }", "Unsupported argument"},
		{"no group", `name = "x"`, "no group configured"},
		{"both runtimes", "group \"g\" {\n builtin = \"demo\"\n plugin { command = \"x\" }\n}", "exactly one"},
		{"neither runtime", `group "g" { workers = 2 }`, "exactly one"},
		{"duplicate group", "group \"g\" { builtin = \"demo\" }\ngroup \"g\" { builtin = \"demo\" }", "twice"},
		{"negative workers", "group \"g\" {\n builtin = \"demo\"\n workers = -1\n}", "positive"},
		{"bad timeout", "front { frame_timeout = \"soon\" }\ngroup \"g\" { builtin = \"demo\" }", "frame_timeout"},
		{"bad cool-down", "group \"g\" {\n builtin = \"demo\"\n governance {\n enabled = true\n user_cool_down = \"often\"\n }\n}", "user_cool_down"},
		{"max under min", "group \"g\" {\n builtin = \"demo\"\n governance {\n enabled = true\n min_workers = 3\n max_workers = 2\n }\n}", "max workers 2 is below min workers 3"},
		{"negative limit", "group \"g\" {\n builtin = \"demo\"\n governance {\n enabled = true\n memory_limit_mb = -1\n }\n}", "memory_limit_mb"},
		{"zero window", "group \"g\" {\n builtin = \"demo\"\n governance {\n enabled = true\n growth_window = \"0s\"\n }\n}", "growth_window"},
		{"negative ceiling", "group \"g\" {\n builtin = \"demo\"\n memory_max_mb = -5\n}", "memory_max_mb"},
		{"negative freeze", "move { freeze_timeout = \"-1s\" }\ngroup \"g\" { builtin = \"demo\" }", "freeze_timeout"},
		{"cluster without data", "server { bootstrap_expect = 3 }\ngroup \"g\" { builtin = \"demo\" }", "needs a data_dir"},
		{"cluster without peers", "data_dir = \"/x\"\nserver { bootstrap_expect = 3 }\ngroup \"g\" { builtin = \"demo\" }", "retry_join"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("test.hcl", []byte(tt.src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// The configuration the README shows is a valid one.
func TestReadmeConfigParses(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "```hcl\n")
	if i < 0 {
		t.Fatal("README has no hcl block")
	}
	s = s[i+len("```hcl\n"):]
	src := s[:strings.Index(s, "```")]
	if _, err := ParseConfig("README.hcl", []byte(src)); err != nil {
		t.Fatalf("the README's configuration does not parse: %v", err)
	}
}
