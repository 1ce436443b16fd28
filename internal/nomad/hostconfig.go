package nomad

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// hostConfig returns the template Nomad renders into local/host.hcl: the
// configuration of "stickyd agent" in the host role, with the allocation's
// names, directories and addresses taken from the Nomad runtime environment.
// Values of the spec are quoted twice, for HCL and, when they hold "{{", for
// the template (see literal).
func (s *spec) hostConfig() string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

	// Named by job and slot, not by allocation: the allocation that
	// replaces this one (a drain, a reschedule, a job update) is the same
	// host, with the same worker ids, and wakes the people parked here.
	line(`name     = "{{ env "NOMAD_JOB_NAME" }}-{{ env "NOMAD_ALLOC_INDEX" }}"`)
	line(`data_dir = "{{ env "NOMAD_ALLOC_DIR" }}/data"`)
	// The agent finishes its stop (moving its people to the other hosts,
	// parking the rest) before Nomad's kill_timeout runs out.
	line(`kill_timeout = %s`, literal(KillTimeout.String()))
	line(``)
	line(`server { enabled = false }`)
	line(`front  { enabled = false }`)
	// The admin token is rendered from the job's Nomad variable
	// (SecretsPath) into the secrets directory.
	line(`admin  {`)
	line(`  address    = "{{ env "NOMAD_ADDR_admin" }}"`)
	line(`  token_file = "{{ env "NOMAD_SECRETS_DIR" }}/admin.token"`)
	line(`}`)
	line(`host {`)
	line(`  groups    = [%s]`, literal(s.Group))
	line(`  raft_addr = "{{ env "NOMAD_ADDR_raft" }}"`)
	line(`  rpc_addr  = "{{ env "NOMAD_ADDR_rpc" }}"`)
	line(`}`)
	// The Consul token too, never in the job: an empty file when the
	// variable holds none (the agent then reads $CONSUL_HTTP_TOKEN).
	line(`consul {`)
	line(`  address        = %s`, literal(s.ConsulAddr))
	line(`  token_file     = "{{ env "NOMAD_SECRETS_DIR" }}/consul.token"`)
	line(`  server_service = %s`, literal(s.ServerService))
	line(`}`)
	line(`bundles { archive = "{{ env "NOMAD_TASK_DIR" }}/bundles" }`)
	if s.TLSCluster != "" {
		// Mutual TLS with the servers, from files the job's variable
		// renders (Secrets' TLS).
		line(`tls {`)
		line(`  ca_file   = "{{ env "NOMAD_SECRETS_DIR" }}/agent-ca.pem"`)
		line(`  cert_file = "{{ env "NOMAD_SECRETS_DIR" }}/host.pem"`)
		line(`  key_file  = "{{ env "NOMAD_SECRETS_DIR" }}/host-key.pem"`)
		line(`  cluster   = %s`, literal(s.TLSCluster))
		line(`}`)
	}
	return b.String()
}

// literal returns s as an HCL quoted string that the template engine
// (consul-template: Go's text/template) copies as it is. HCL's escapes
// cover quotes, backslashes, control characters and its own "${" and "%{"
// sequences. A literal that holds "{{" would open a template action, so it
// becomes one that prints the literal as a Go string constant. A "{{" can
// only appear inside the literal: the quotes around it part it from the
// template text on either side.
func literal(s string) string {
	q := strings.TrimSpace(string(hclwrite.TokensForValue(cty.StringVal(s)).Bytes()))
	if !strings.Contains(q, "{{") {
		return q
	}
	return "{{ " + strconv.Quote(q) + " }}"
}
