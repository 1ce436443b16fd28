package nomad

import (
	"reflect"
	"strings"
	"testing"
	"text/template"

	"github.com/hashicorp/hcl/v2/hclsimple"
)

// hostFile mirrors the shape of the host configuration the template writes,
// as "stickyd agent" reads it.
type hostFile struct {
	Name        string `hcl:"name"`
	DataDir     string `hcl:"data_dir"`
	KillTimeout string `hcl:"kill_timeout"`
	Server      struct {
		Enabled bool `hcl:"enabled"`
	} `hcl:"server,block"`
	Front struct {
		Enabled bool `hcl:"enabled"`
	} `hcl:"front,block"`
	Admin struct {
		Address   string `hcl:"address"`
		Token     string `hcl:"token,optional"`
		TokenFile string `hcl:"token_file,optional"`
	} `hcl:"admin,block"`
	Host struct {
		Groups   []string `hcl:"groups"`
		RaftAddr string   `hcl:"raft_addr"`
		RPCAddr  string   `hcl:"rpc_addr"`
	} `hcl:"host,block"`
	Consul struct {
		Address       string `hcl:"address"`
		Token         string `hcl:"token,optional"`
		TokenFile     string `hcl:"token_file,optional"`
		ServerService string `hcl:"server_service"`
	} `hcl:"consul,block"`
	Bundles struct {
		Archive string `hcl:"archive"`
	} `hcl:"bundles,block"`
	TLS *struct {
		CAFile   string `hcl:"ca_file"`
		CertFile string `hcl:"cert_file"`
		KeyFile  string `hcl:"key_file"`
		Cluster  string `hcl:"cluster"`
	} `hcl:"tls,block"`
}

// testEnv is the Nomad runtime environment the template reads.
var testEnv = map[string]string{
	"NOMAD_JOB_NAME":       "stickyd-group-web",
	"NOMAD_ALLOC_INDEX":    "2",
	"NOMAD_SHORT_ALLOC_ID": "1a2b3c4d",
	"NOMAD_ALLOC_DIR":      "/alloc",
	"NOMAD_TASK_DIR":       "/local",
	"NOMAD_SECRETS_DIR":    "/secrets",
	"NOMAD_ADDR_admin":     "10.0.0.7:25001",
	"NOMAD_ADDR_raft":      "10.0.0.7:25002",
	"NOMAD_ADDR_rpc":       "10.0.0.7:25003",
}

// renderHost renders a job's host.hcl template the way consul-template
// does (Go's text/template with the default delimiters), then decodes it.
func renderHost(t *testing.T, g GroupJob) (string, hostFile) {
	t.Helper()
	job, err := Render(g)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := job.TaskGroups[0].Tasks[0].Templates[0]
	if *tmpl.DestPath != "local/host.hcl" || *tmpl.ChangeMode != "restart" {
		t.Fatalf("template destination %q, change mode %q", *tmpl.DestPath, *tmpl.ChangeMode)
	}
	tp, err := template.New("host.hcl").Option("missingkey=error").Funcs(template.FuncMap{
		"env": func(k string) string { return testEnv[k] },
	}).Parse(*tmpl.EmbeddedTmpl)
	if err != nil {
		t.Fatalf("parsing the template: %v\n%s", err, *tmpl.EmbeddedTmpl)
	}
	var out strings.Builder
	if err := tp.Execute(&out, nil); err != nil {
		t.Fatalf("executing the template: %v", err)
	}
	var f hostFile
	if err := hclsimple.Decode("host.hcl", []byte(out.String()), nil, &f); err != nil {
		t.Fatalf("decoding the rendered host.hcl: %v\n%s", err, out.String())
	}
	return out.String(), f
}

func TestHostConfig(t *testing.T) {
	g := validJob()
	g.ConsulAddr = "consul.local:8500"
	g.ServerService = "stickyd-eu"
	_, f := renderHost(t, g)

	var want hostFile
	// Named by slot: a replacement allocation is the same host.
	want.Name = "stickyd-group-web-2"
	want.DataDir = "/alloc/data"
	want.KillTimeout = "30s"
	want.Admin.Address, want.Admin.TokenFile = "10.0.0.7:25001", "/secrets/admin.token"
	want.Host.Groups = []string{"web"}
	want.Host.RaftAddr, want.Host.RPCAddr = "10.0.0.7:25002", "10.0.0.7:25003"
	want.Consul.Address, want.Consul.ServerService, want.Consul.TokenFile = "consul.local:8500", "stickyd-eu", "/secrets/consul.token"
	want.Bundles.Archive = "/local/bundles"
	if !reflect.DeepEqual(f, want) {
		t.Errorf("host.hcl decoded to\n%+v\nwant\n%+v", f, want)
	}
}

// The Consul token is never in the host configuration (the job): the
// hosts read it from the file the job's Nomad variable renders.
func TestHostConfigConsulTokenFromTheVariable(t *testing.T) {
	g := validJob()
	g.ConsulToken = "consul-secret-token"
	text, f := renderHost(t, g)
	if strings.Contains(text, g.ConsulToken) || f.Consul.Token != "" {
		t.Errorf("the consul token is in host.hcl:\n%s", text)
	}
	if !strings.HasSuffix(f.Consul.TokenFile, "/consul.token") {
		t.Errorf("consul token_file %q", f.Consul.TokenFile)
	}
	if f.Consul.Address != DefaultConsulAddr || f.Consul.ServerService != DefaultServerService {
		t.Errorf("consul block %+v, want the defaults", f.Consul)
	}
}

// With TLSCluster the hosts get a tls block naming the files the job's
// variable renders, and the job the templates that render them (0600,
// SIGHUP on a change: the agent reloads them).
func TestHostConfigTLS(t *testing.T) {
	g := validJob()
	if _, f := renderHost(t, g); f.TLS != nil {
		t.Fatalf("a tls block without TLSCluster: %+v", f.TLS)
	}
	g.TLSCluster = "eu"
	_, f := renderHost(t, g)
	if f.TLS == nil || f.TLS.CAFile != "/secrets/agent-ca.pem" || f.TLS.CertFile != "/secrets/host.pem" || f.TLS.KeyFile != "/secrets/host-key.pem" || f.TLS.Cluster != "eu" {
		t.Fatalf("tls block %+v", f.TLS)
	}
	job, err := Render(g)
	if err != nil {
		t.Fatal(err)
	}
	tmpls := job.TaskGroups[0].Tasks[0].Templates
	found := map[string]bool{}
	for _, tp := range tmpls {
		if d := *tp.DestPath; strings.HasSuffix(d, ".pem") {
			found[d] = *tp.Perms == "0600" && *tp.ChangeMode == "signal" && *tp.ChangeSignal == "SIGHUP" &&
				strings.Contains(*tp.EmbeddedTmpl, `nomadVar "nomad/jobs/stickyd-group-`)
		}
	}
	for _, d := range []string{"secrets/agent-ca.pem", "secrets/host.pem", "secrets/host-key.pem"} {
		if !found[d] {
			t.Errorf("template %s: %v", d, found)
		}
	}
}

// TestHostConfigEscaping checks that values reach the agent as they were
// given, whatever HCL or the template engine would make of them.
func TestHostConfigEscaping(t *testing.T) {
	values := []string{
		`plain`,
		`quote"inside`,
		`back\slash`,
		`{{ env "HOME" }}`,
		`{{`,
		`}}`,
		`a{{b`,
		`{{"}}`,
		`\"{{\"`,
		`${NOMAD_TASK_DIR}`,
		`%{ if true }x%{ endif }`,
		`$${x}`,
		"new\nline\ttab\x01ctl",
		`{{- "trim" -}}`,
		`/* comment */ # not`,
		"unicodé ✓",
		`}`,
		`{`,
	}
	for _, v := range values {
		t.Run(v, func(t *testing.T) {
			g := validJob()
			g.ConsulAddr = v
			g.ServerService = v
			text, f := renderHost(t, g)
			for _, c := range []struct{ name, got, want string }{
				{"consul address", f.Consul.Address, v},
				{"server service", f.Consul.ServerService, v},
			} {
				if c.got != c.want {
					t.Errorf("%s read back as %q, want %q; host.hcl:\n%s", c.name, c.got, c.want, text)
				}
			}
		})
	}
}
