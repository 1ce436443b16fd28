package nomad

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/stickyd/stickyd/internal/bundle"
)

// Names and values the rendered jobs share with whoever reads them back.
const (
	// JobPrefix starts the ID of every group job: JobID(group) is
	// JobPrefix + group.
	JobPrefix = "stickyd-group-"
	// TaskGroupName and TaskName name the job's only task group and task.
	TaskGroupName = "host"
	TaskName      = "host"
	// HostService is the Nomad service of the host tasks' admin API, tagged
	// with the group name.
	HostService = "stickyd-host"

	// MetaGroup, MetaBundle and MetaWorkers are job meta keys holding the
	// group's name, bundle digest and workers per host; MetaSpec holds a
	// hash of the rendered job (without MetaSpec), which Register compares
	// to skip registering an unchanged job.
	MetaGroup   = "stickyd_group"
	MetaBundle  = "stickyd_bundle"
	MetaWorkers = "stickyd_workers"
	MetaSpec    = "stickyd_spec"

	// Defaults of GroupJob's zero values.
	DefaultDatacenter    = "dc1"
	DefaultDriver        = "exec"
	DefaultConsulAddr    = "127.0.0.1:8500"
	DefaultServerService = "stickyd-server"
	DefaultCPU           = 500
	DefaultMemoryMB      = 512
	DefaultCount         = 2
	DefaultDiskMB        = 1024

	// KillTimeout is how long Nomad waits after SIGTERM before killing the
	// host task; the agent is given it (kill_timeout) and finishes its
	// stop (moving its people to the group's other hosts, parking the
	// rest) a margin earlier. It is Nomad clients' default
	// max_kill_timeout, which caps any longer value.
	KillTimeout = 30 * time.Second

	// SecretItem is the item of a group job's Nomad variable
	// (SecretsPath) that holds the admin token the hosts join with;
	// ConsulTokenItem the one that holds their Consul token, if any.
	SecretItem      = "admin_token"
	ConsulTokenItem = "consul_token"
	// The TLS items, PEM: the CA, the hosts' certificate and its key.
	TLSCAItem   = "tls_ca"
	TLSCertItem = "tls_cert"
	TLSKeyItem  = "tls_key"

	// hostConfigPath is where the template writes the agent's configuration
	// and bundlesDir where the bundle artifact lands, both in the task
	// directory.
	hostConfigPath  = "local/host.hcl"
	hostTokenPath   = "secrets/admin.token"
	consulTokenPath = "secrets/consul.token"
	tlsCAPath       = "secrets/agent-ca.pem"
	tlsCertPath     = "secrets/host.pem"
	tlsKeyPath      = "secrets/host-key.pem"
	bundlesDir      = "local/bundles"
)

// ErrInvalid is wrapped by every error Render returns for a bad GroupJob.
var ErrInvalid = errors.New("invalid group job")

// groupRE matches the group names the admin API accepts (internal/api);
// envRE the environment variable names Env may set.
var (
	groupRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	envRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// GroupJob is what the Nomad job of one group is made of. Zero values take
// the defaults documented on each field.
type GroupJob struct {
	// Group is the group's name, as the admin API accepts it.
	Group string
	// Bundle is the digest of the group's bundle, "sha256:<64 hex>".
	Bundle string
	// Archive is the base URL of the HTTP bundle archive the Nomad clients
	// fetch the bundle from (<Archive>/<hex>.tar.gz).
	Archive string
	// Workers is how many workers each host task runs (default 1). The
	// hosts take the number from the servers; the job only records it in
	// its meta (MetaWorkers).
	Workers int
	// Count is the number of host allocations (default 2, so that a
	// drained or replaced host has another to move its people to; Nomad
	// spreads them over nodes). MaxCount, when
	// above Count, adds a scaling block (min Count, max MaxCount) so an
	// autoscaler may change the count; Register then keeps the count it
	// finds within those bounds.
	Count    int
	MaxCount int
	// Datacenters defaults to ["dc1"]; Namespace and Region to the Nomad
	// client's.
	Datacenters []string
	Namespace   string
	Region      string
	// Driver is "exec" (default) or "raw_exec".
	Driver string
	// Exactly one of Stickyd and StickydCommand says where the stickyd
	// binary comes from: a tarball holding it at its root, or an absolute
	// path on the Nomad clients.
	Stickyd        Artifact
	StickydCommand string
	// ConsulAddr (default 127.0.0.1:8500, the clients' local Consul agent)
	// is the Consul the hosts find the servers in, under the service
	// ServerService (default "stickyd-server"); ConsulToken, their token,
	// is not rendered into the job: PutSecrets writes it to the job's
	// Nomad variable, which the hosts read it from.
	ConsulAddr    string
	ConsulToken   string
	ServerService string
	// TLSCluster, when set, gives the hosts a tls block of that cluster
	// name, its files rendered from the job's variable (Secrets' TLS).
	TLSCluster string
	// CPU (MHz, default 500) and MemoryMB (default 512) are the host task's
	// resources; DiskMB (default 1024) its ephemeral disk, which holds the
	// park store.
	CPU      int
	MemoryMB int
	DiskMB   int
	// NodePool places the hosts in a Nomad node pool (default: the
	// job's default pool). DistinctHosts puts every host on its own node
	// (a hard constraint); without it they are spread over nodes when
	// there are several.
	NodePool      string
	DistinctHosts bool
	// Env is added to the host task's environment, which its workers
	// inherit. Nomad interpolates its values ("${NOMAD_ALLOC_DIR}/cache").
	Env map[string]string
}

// Artifact is a file Nomad's go-getter fetches.
type Artifact struct {
	// Source is its URL.
	Source string
	// Checksum is go-getter's "type:value" ("sha256:<hex>"); empty means
	// unchecked.
	Checksum string
}

// JobID returns the ID of a group's job.
func JobID(group string) string { return JobPrefix + group }

// SecretsPath is the Nomad variable a group's job reads its secrets from:
// the job's own path, which its tasks may read without any ACL policy
// (Nomad's implicit workload policy). The leader writes it (PutSecrets)
// before it registers the job; nothing secret is in the job itself.
func SecretsPath(group string) string { return "nomad/jobs/" + JobID(group) }

// Render checks g and builds its Nomad job. Errors wrap ErrInvalid. The job
// is a pure function of g: rendering the same GroupJob twice gives equal
// jobs, with the same MetaSpec.
func Render(g GroupJob) (*api.Job, error) {
	s, err := g.finish()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	job := s.job()
	spec, err := specHash(job)
	if err != nil {
		return nil, fmt.Errorf("rendering job of group %q: %w", g.Group, err)
	}
	job.Meta[MetaSpec] = spec
	return job, nil
}

// spec is a checked GroupJob with its defaults applied.
type spec struct {
	GroupJob
	hex         string // the bundle digest's hex digits
	bundleURL   string
	stickydPath string // the task's command
}

// finish applies the defaults to a copy of g and checks it.
func (g GroupJob) finish() (*spec, error) {
	if !groupRE.MatchString(g.Group) {
		return nil, fmt.Errorf("group name %q: use 1-63 of a-z 0-9 _ -, starting with a letter or digit", g.Group)
	}
	digest, err := bundle.ParseDigest(g.Bundle)
	if err != nil {
		return nil, fmt.Errorf("group %q: bundle: %w", g.Group, err)
	}
	s := &spec{GroupJob: g, hex: strings.TrimPrefix(digest, bundle.DigestPrefix)}
	s.Bundle = digest
	if g.Archive == "" {
		return nil, fmt.Errorf("group %q: archive is empty: give the http(s):// URL of the bundle archive", g.Group)
	}
	arch, err := bundle.NewHTTPArchive(g.Archive, bundle.ArchiveOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("group %q: %w", g.Group, err)
	}
	s.bundleURL = arch.URL(s.hex + ".tar.gz")

	if err := defaultCount("workers", &s.Workers, 1); err != nil {
		return nil, fmt.Errorf("group %q: %w", g.Group, err)
	}
	if err := defaultCount("count", &s.Count, DefaultCount); err != nil {
		return nil, fmt.Errorf("group %q: %w", g.Group, err)
	}
	switch {
	case s.MaxCount == 0:
		s.MaxCount = s.Count
	case s.MaxCount < s.Count:
		return nil, fmt.Errorf("group %q: max_count %d is below count %d", g.Group, s.MaxCount, s.Count)
	}
	if err := defaultCount("cpu", &s.CPU, DefaultCPU); err != nil {
		return nil, fmt.Errorf("group %q: %w", g.Group, err)
	}
	if err := defaultCount("memory_mb", &s.MemoryMB, DefaultMemoryMB); err != nil {
		return nil, fmt.Errorf("group %q: %w", g.Group, err)
	}
	if err := defaultCount("disk_mb", &s.DiskMB, DefaultDiskMB); err != nil {
		return nil, fmt.Errorf("group %q: %w", g.Group, err)
	}

	if len(s.Datacenters) == 0 {
		s.Datacenters = []string{DefaultDatacenter}
	}
	for _, dc := range s.Datacenters {
		if dc == "" {
			return nil, fmt.Errorf("group %q: empty datacenter name", g.Group)
		}
	}
	if s.Driver == "" {
		s.Driver = DefaultDriver
	}
	if s.Driver != "exec" && s.Driver != "raw_exec" {
		return nil, fmt.Errorf("group %q: driver %q: want exec or raw_exec", g.Group, s.Driver)
	}

	switch art, cmd := s.Stickyd.Source != "" || s.Stickyd.Checksum != "", s.StickydCommand != ""; {
	case art && cmd:
		return nil, fmt.Errorf("group %q: give either a stickyd artifact or a stickyd command, not both", g.Group)
	case !art && !cmd:
		return nil, fmt.Errorf("group %q: no stickyd binary: give a stickyd artifact (a tarball with stickyd at its root) or the stickyd command's absolute path", g.Group)
	case art:
		if s.Stickyd.Source == "" {
			return nil, fmt.Errorf("group %q: stickyd artifact has a checksum but no source", g.Group)
		}
		if c := s.Stickyd.Checksum; c != "" {
			if typ, val, ok := strings.Cut(c, ":"); !ok || typ == "" || val == "" {
				return nil, fmt.Errorf("group %q: stickyd artifact checksum %q: want type:value, like sha256:<hex>", g.Group, c)
			}
		}
		s.stickydPath = "local/stickyd"
	default:
		if !path.IsAbs(s.StickydCommand) {
			return nil, fmt.Errorf("group %q: stickyd command %q: want an absolute path", g.Group, s.StickydCommand)
		}
		s.stickydPath = s.StickydCommand
	}

	if s.ConsulAddr == "" {
		s.ConsulAddr = DefaultConsulAddr
	}
	if s.ServerService == "" {
		s.ServerService = DefaultServerService
	}
	for k := range s.Env {
		switch {
		case !envRE.MatchString(k):
			return nil, fmt.Errorf("group %q: env %q: not a variable name (letters, digits and _, not starting with a digit)", g.Group, k)
		case k == "STICKYD_TOKEN":
			return nil, fmt.Errorf("group %q: env %q is set from the admin token", g.Group, k)
		}
	}
	return s, nil
}

// defaultCount sets *v to def when it is zero, and refuses a negative one.
func defaultCount(name string, v *int, def int) error {
	switch {
	case *v == 0:
		*v = def
	case *v < 0:
		return fmt.Errorf("%s is %d: want at least 1 (0 for the default, %d)", name, *v, def)
	}
	return nil
}

// job builds the job of a checked spec; Meta lacks MetaSpec.
func (s *spec) job() *api.Job {
	job := &api.Job{
		ID:          new(JobID(s.Group)),
		Name:        new(JobID(s.Group)),
		Type:        new(api.JobTypeService),
		Datacenters: s.Datacenters,
		Meta: map[string]string{
			MetaGroup:   s.Group,
			MetaBundle:  s.Bundle,
			MetaWorkers: fmt.Sprint(s.Workers),
		},
		TaskGroups: []*api.TaskGroup{s.taskGroup()},
	}
	if s.Namespace != "" {
		job.Namespace = new(s.Namespace)
	}
	if s.Region != "" {
		job.Region = new(s.Region)
	}
	if s.NodePool != "" {
		job.NodePool = new(s.NodePool)
	}
	return job
}

// taskGroup builds the "host" task group.
func (s *spec) taskGroup() *api.TaskGroup {
	tg := &api.TaskGroup{
		Name:  new(TaskGroupName),
		Count: new(s.Count),
		Networks: []*api.NetworkResource{{
			DynamicPorts: []api.Port{{Label: "admin"}, {Label: "raft"}, {Label: "rpc"}},
		}},
		// Healthy only while the host is a raft member that hears from the
		// leader (GET /v1/agent/health needs no token).
		Services: []*api.Service{{
			Name:      HostService,
			Tags:      []string{s.Group},
			PortLabel: "admin",
			Provider:  "consul",
			Checks: []api.ServiceCheck{{
				Name:     "raft member",
				Type:     "http",
				Path:     "/v1/agent/health",
				Interval: 5 * time.Second,
				Timeout:  2 * time.Second,
			}},
		}},
		// The data dir lives in the alloc dir: a replacement allocation on
		// the same node keeps it, one on another node gets a copy.
		EphemeralDisk: &api.EphemeralDisk{Sticky: new(true), Migrate: new(true), SizeMB: new(s.DiskMB)},
		// A few restarts in place, then fail and let Nomad place the host
		// elsewhere, forever with a capped backoff.
		RestartPolicy: &api.RestartPolicy{
			Attempts: new(3),
			Interval: new(10 * time.Minute),
			Delay:    new(15 * time.Second),
			Mode:     new(api.RestartPolicyModeFail),
		},
		ReschedulePolicy: &api.ReschedulePolicy{
			Delay:         new(30 * time.Second),
			DelayFunction: new("exponential"),
			MaxDelay:      new(10 * time.Minute),
			Unlimited:     new(true),
		},
		// One host at a time: each one parks its people when it stops. No
		// auto_revert: the reconciler would register the new version again
		// and the two would take turns.
		Update: &api.UpdateStrategy{
			MaxParallel:      new(1),
			HealthCheck:      new("checks"),
			MinHealthyTime:   new(10 * time.Second),
			HealthyDeadline:  new(5 * time.Minute),
			ProgressDeadline: new(10 * time.Minute),
			AutoRevert:       new(false),
		},
		Tasks: []*api.Task{s.task()},
	}
	if s.DistinctHosts {
		tg.Constraints = []*api.Constraint{{Operand: api.ConstraintDistinctHosts, RTarget: "true"}}
	} else {
		tg.Spreads = []*api.Spread{{Attribute: "${node.unique.id}"}}
	}
	if s.MaxCount > s.Count {
		tg.Scaling = &api.ScalingPolicy{
			Min:     new(int64(s.Count)),
			Max:     new(int64(s.MaxCount)),
			Enabled: new(true),
		}
	}
	return tg
}

// task builds the "host" task.
func (s *spec) task() *api.Task {
	env := map[string]string{}
	for k, v := range s.Env {
		env[k] = v
	}
	t := &api.Task{
		Name:   TaskName,
		Driver: s.Driver,
		Config: map[string]any{
			"command": s.stickydPath,
			"args":    []string{"agent", "-config", hostConfigPath},
		},
		Env: env,
		Artifacts: []*api.TaskArtifact{{
			GetterSource: new(s.bundleURL),
			// The bundle is kept as it is: the agent verifies and unpacks
			// it from its directory archive.
			GetterOptions: map[string]string{
				"checksum": bundle.DigestPrefix + s.hex,
				"archive":  "false",
			},
			GetterMode:   new("file"),
			RelativeDest: new(path.Join(bundlesDir, s.hex+".tar.gz")),
		}},
		Templates: []*api.Template{{
			DestPath:     new(hostConfigPath),
			EmbeddedTmpl: new(s.hostConfig()),
			ChangeMode:   new("restart"),
			Perms:        new("0600"),
		}, {
			// The admin token, from the job's Nomad variable, into the
			// secrets directory (admin.token_file); the task waits until
			// the variable exists.
			DestPath:     new(hostTokenPath),
			EmbeddedTmpl: new(fmt.Sprintf(`{{ with nomadVar %q }}{{ .%s }}{{ end }}`, SecretsPath(s.Group), SecretItem)),
			ChangeMode:   new("restart"),
			Perms:        new("0600"),
		}, {
			// The Consul token likewise (consul.token_file): empty when
			// the variable holds none.
			DestPath:     new(consulTokenPath),
			EmbeddedTmpl: new(fmt.Sprintf(`{{ with nomadVar %q }}{{ .%s }}{{ end }}`, SecretsPath(s.Group), ConsulTokenItem)),
			ChangeMode:   new("restart"),
			Perms:        new("0600"),
		}},
		Resources: &api.Resources{
			CPU:      new(s.CPU),
			MemoryMB: new(s.MemoryMB),
		},
		KillSignal:  "SIGTERM",
		KillTimeout: new(KillTimeout),
	}
	if s.Stickyd.Source != "" {
		a := &api.TaskArtifact{
			GetterSource: new(s.Stickyd.Source),
			RelativeDest: new("local/"),
		}
		if s.Stickyd.Checksum != "" {
			a.GetterOptions = map[string]string{"checksum": s.Stickyd.Checksum}
		}
		t.Artifacts = append(t.Artifacts, a)
	}
	if s.TLSCluster != "" {
		// The CA and the host's certificate and key, from the job's
		// variable into the secrets directory (the tls block's files).
		for _, f := range []struct{ dest, item string }{{tlsCAPath, TLSCAItem}, {tlsCertPath, TLSCertItem}, {tlsKeyPath, TLSKeyItem}} {
			t.Templates = append(t.Templates, &api.Template{
				DestPath:     new(f.dest),
				EmbeddedTmpl: new(fmt.Sprintf(`{{ with nomadVar %q }}{{ .%s }}{{ end }}`, SecretsPath(s.Group), f.item)),
				// The agent reloads its certificates on SIGHUP.
				ChangeMode:   new("signal"),
				ChangeSignal: new("SIGHUP"),
				Perms:        new("0600"),
			})
		}
	}
	return t
}

// specHash hashes the JSON of a job, which encoding/json writes the same
// way for equal jobs (struct fields in order, map keys sorted).
func specHash(job *api.Job) (string, error) {
	b, err := json.Marshal(job)
	if err != nil {
		return "", fmt.Errorf("hashing job spec: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}
