package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// consul and nomad read their tokens from token_file when given (a Nomad
// template's secrets file): white space around it ignored.
func TestTokenFiles(t *testing.T) {
	dir := t.TempDir()
	consulFile, nomadFile := filepath.Join(dir, "consul.token"), filepath.Join(dir, "nomad.token")
	if err := os.WriteFile(consulFile, []byte("  c-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nomadFile, []byte("n-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf("consul { token_file = %q }\nnomad {\n token_file = %q\n stickyd_command = \"/bin/stickyd\"\n archive = \"http://a/b\"\n}\n", consulFile, nomadFile)
	c, err := ParseConfig("test.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if c.Consul.Token != "c-token" || c.Nomad.Token != "n-token" {
		t.Fatalf("tokens %q %q", c.Consul.Token, c.Nomad.Token)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"syntax", `name = `, "test.hcl:1"},
		{"unknown field", "colour = \"red\"\ngroup \"g\" { builtin = \"demo\" }", "Unsupported argument"},
		{"host without data", "server { enabled = false }\nhost { join = [\"s:4650\"] }", "needs a data_dir"},
		{"host without servers", "data_dir = \"/x\"\nserver { enabled = false }", "host.join"},
		{"host with bootstrap", "data_dir = \"/x\"\nserver {\n enabled = false\n bootstrap_expect = 3\n}\nhost { join = [\"s:4650\"] }", "a host joins with host.join"},
		{"nomad on a host", "data_dir = \"/x\"\nserver { enabled = false }\nconsul {}\nnomad { stickyd_command = \"/bin/stickyd\" }", "only servers"},
		{"nomad without stickyd", "consul {}\nnomad { archive = \"http://a/b\" }", "exactly one of stickyd_artifact"},
		{"nomad without archive", "consul {}\nnomad { stickyd_command = \"/bin/stickyd\" }", "archive is empty"},
		{"nomad without consul", "nomad {\n stickyd_command = \"/bin/stickyd\"\n archive = \"http://a/b\"\n}", "add a consul block"},
		{"consul token and token_file", "consul {\n token = \"a\"\n token_file = \"/b\"\n}\ngroup \"g\" { builtin = \"demo\" }", "not both"},
		{"consul token_file missing", "consul { token_file = \"/nonexistent/consul.token\" }\ngroup \"g\" { builtin = \"demo\" }", "reading token_file"},
		{"nomad token_file missing", "consul {}\nnomad {\n token_file = \"/nonexistent/nomad.token\"\n stickyd_command = \"/bin/stickyd\"\n archive = \"http://a/b\"\n}", "nomad: reading token_file"},
		{"nomad tls without the hosts' certificate", "tls {\n ca_file = \"/a\"\n cert_file = \"/b\"\n key_file = \"/c\"\n}\nconsul {}\nnomad {\n stickyd_command = \"/bin/stickyd\"\n archive = \"http://a/b\"\n}", "host_cert_file and host_key_file"},
		{"nomad host cert without key", "consul {}\nnomad {\n host_cert_file = \"/h\"\n stickyd_command = \"/bin/stickyd\"\n archive = \"http://a/b\"\n}", "together"},
		{"nomad bad driver", "consul {}\nnomad {\n driver = \"docker\"\n stickyd_command = \"/bin/stickyd\"\n}", "driver"},
		{"both runtimes", "group \"g\" {\n builtin = \"demo\"\n plugin { command = \"x\" }\n}", "exactly one"},
		{"neither runtime", `group "g" { workers = 2 }`, "exactly one"},
		{"unknown plugin runtime", "group \"g\" {\n plugin {\n runtime = \"ruby\"\n command = \"app:app\"\n }\n}", "plugin runtime \"ruby\""},
		{"interpreter of a go-plugin worker", "group \"g\" {\n plugin {\n command = \"/bin/worker\"\n interpreter = \"/usr/bin/python3\"\n }\n}", "is for runtime \"python3\""},
		{"duplicate group", "group \"g\" { builtin = \"demo\" }\ngroup \"g\" { builtin = \"demo\" }", "twice"},
		{"negative workers", "group \"g\" {\n builtin = \"demo\"\n workers = -1\n}", "positive"},
		{"bad timeout", "front { frame_timeout = \"soon\" }\ngroup \"g\" { builtin = \"demo\" }", "frame_timeout"},
		{"bad cool-down", "group \"g\" {\n builtin = \"demo\"\n governance {\n enabled = true\n user_cool_down = \"often\"\n }\n}", "user_cool_down"},
		{"max under min", "group \"g\" {\n builtin = \"demo\"\n governance {\n enabled = true\n min_workers = 3\n max_workers = 2\n }\n}", "max workers 2 is below min workers 3"},
		{"negative limit", "group \"g\" {\n builtin = \"demo\"\n governance {\n enabled = true\n memory_limit_mb = -1\n }\n}", "memory_limit_mb"},
		{"zero window", "group \"g\" {\n builtin = \"demo\"\n governance {\n enabled = true\n growth_window = \"0s\"\n }\n}", "growth_window"},
		{"negative ceiling", "group \"g\" {\n builtin = \"demo\"\n memory_max_mb = -5\n}", "memory_max_mb"},
		{"negative freeze", "move { freeze_timeout = \"-1s\" }\ngroup \"g\" { builtin = \"demo\" }", "freeze_timeout"},
		{"negative held bytes", "move { held_bytes = -1 }\ngroup \"g\" { builtin = \"demo\" }", "held_bytes"},
		{"bad idle_park", "lifecycle { idle_park = \"soon\" }\ngroup \"g\" { builtin = \"demo\" }", "idle_park"},
		{"idle_park too short", "lifecycle { idle_park = \"10ms\" }\ngroup \"g\" { builtin = \"demo\" }", "at least 1s"},
		{"negative max_message_bytes", "front { max_message_bytes = -1 }\ngroup \"g\" { builtin = \"demo\" }", "must not be negative"},
		{"negative max_held", "front { max_held = -1 }\ngroup \"g\" { builtin = \"demo\" }", "max_held_per_user and max_held must not be negative"},
		{"negative max_held_per_user", "front { max_held_per_user = -3 }\ngroup \"g\" { builtin = \"demo\" }", "max_held_per_user and max_held must not be negative"},
		{"negative nomad cpu", "consul {}\nnomad {\n stickyd_command = \"/bin/stickyd\"\n archive = \"http://a/b\"\n cpu = -1\n}", "nomad: hosts, max_hosts, cpu, memory_mb and disk_mb must not be negative"},
		{"negative nomad hosts", "consul {}\nnomad {\n stickyd_command = \"/bin/stickyd\"\n archive = \"http://a/b\"\n hosts = -2\n}", "must not be negative"},
		{"negative nomad disk", "consul {}\nnomad {\n stickyd_command = \"/bin/stickyd\"\n archive = \"http://a/b\"\n disk_mb = -1\n}", "must not be negative"},
		{"body budget under one body", "front {\n max_body_bytes = 1000000\n body_budget_bytes = 1000\n}\ngroup \"g\" { builtin = \"demo\" }", "less than one request may send"},
		{"negative page bound", "group \"g\" {\n builtin = \"demo\"\n max_pages_per_conn = -1\n}", "must not be negative"},
		{"person bound under page bound", "group \"g\" {\n builtin = \"demo\"\n max_page_bytes = 2000\n max_person_bytes = 1000\n}", "less than max_page_bytes"},
		{"bad forget_after", "lifecycle { forget_after = \"never\" }\ngroup \"g\" { builtin = \"demo\" }", "forget_after"},
		{"forget_after too short", "lifecycle { forget_after = \"1ms\" }\ngroup \"g\" { builtin = \"demo\" }", "at least 1s"},
		{"cluster without data", "server { bootstrap_expect = 3 }\ngroup \"g\" { builtin = \"demo\" }", "needs a data_dir"},
		{"tls without key_file", "tls {\n ca_file = \"ca.pem\"\n cert_file = \"c.pem\"\n}\ngroup \"g\" { builtin = \"demo\" }", "key_file"},
		{"tls with an empty file", "tls {\n ca_file = \"\"\n cert_file = \"c.pem\"\n key_file = \"k.pem\"\n}\ngroup \"g\" { builtin = \"demo\" }", "all required"},
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

// A host: not a server, no front, a few catalog groups, joining through
// Consul; its raft and peer-link addresses are the host block's.
func TestParseHostConfig(t *testing.T) {
	c, err := ParseConfig("host.hcl", []byte(`
data_dir = "/var/lib/stickyd"
server { enabled = false }
front  { enabled = false }
host {
  groups    = ["v2"]
  raft_addr = "10.0.0.9:24647"
  rpc_addr  = "10.0.0.9:24648"
}
consul { token = "t" }
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.IsServer() || c.FrontEnabled() || !c.clustered() {
		t.Fatalf("server %v front %v clustered %v", c.IsServer(), c.FrontEnabled(), c.clustered())
	}
	if c.Server.RaftAddr != "10.0.0.9:24647" || c.Server.RPCAddr != "10.0.0.9:24648" {
		t.Fatalf("raft %q rpc %q", c.Server.RaftAddr, c.Server.RPCAddr)
	}
	if !c.runsCatalogGroup("v2") || c.runsCatalogGroup("v1") {
		t.Fatal("host.groups is not the filter of catalog groups")
	}
	if c.Consul.Address != "127.0.0.1:8500" && os.Getenv("CONSUL_HTTP_ADDR") == "" || c.Consul.ServerService != "stickyd-server" || c.Consul.Prefix != "stickyd/" {
		t.Fatalf("consul defaults %+v", c.Consul)
	}
	srv, err := ParseConfig("server.hcl", []byte("host { enabled = false }"))
	if err != nil {
		t.Fatal(err)
	}
	if !srv.IsServer() || srv.runsCatalogGroup("v1") {
		t.Fatal("a server with host disabled runs catalog groups")
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

func TestLifecycleDefaults(t *testing.T) {
	var none *LifecycleConfig
	if none.Idle() != DefaultIdlePark || none.Forget() != DefaultForgetAfter {
		t.Fatalf("defaults: idle_park %v, forget_after %v", none.Idle(), none.Forget())
	}
	off := &LifecycleConfig{IdlePark: "off", ForgetAfter: "off"}
	if off.Idle() != 0 || off.Forget() != 0 {
		t.Fatalf("off: idle_park %v, forget_after %v", off.Idle(), off.Forget())
	}
	set := &LifecycleConfig{IdlePark: "2s", ForgetAfter: "10s"}
	if set.Idle() != 2*time.Second || set.Forget() != 10*time.Second {
		t.Fatalf("set: idle_park %v, forget_after %v", set.Idle(), set.Forget())
	}
}
