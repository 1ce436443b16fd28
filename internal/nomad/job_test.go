package nomad

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// testBundle is a digest Render accepts.
const testBundle = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

// validJob is a GroupJob that renders; tests change one thing at a time.
func validJob() GroupJob {
	return GroupJob{
		Group:   "web",
		Bundle:  testBundle,
		Archive: "http://bundles.service.consul:4660",
		Stickyd: Artifact{Source: "https://releases.example.com/stickyd_linux_amd64.tar.gz"},
	}
}

// goldenJSON is the JSON of a job as the golden files hold it: indented by
// two spaces, object keys sorted, null values left out (they only say which
// fields the api package has, which changes with its version).
func goldenJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(pruneNulls(tree)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func pruneNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
				continue
			}
			v[k] = pruneNulls(e)
		}
	case []any:
		for i, e := range v {
			v[i] = pruneNulls(e)
		}
	}
	return v
}

func TestRenderGolden(t *testing.T) {
	cases := map[string]GroupJob{
		"artifact_exec": {
			Group:   "web",
			Bundle:  testBundle,
			Archive: "http://bundles.service.consul:4660",
			Workers: 4,
			Stickyd: Artifact{
				Source:   "https://releases.example.com/stickyd_0.9.0_linux_amd64.tar.gz",
				Checksum: "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
			},
		},
		"command_raw_exec": {
			Group:          "billing_v2",
			Bundle:         strings.TrimPrefix(testBundle, "sha256:"),
			Archive:        "https://archive.internal.example.com/stickyd/bundles/",
			Workers:        2,
			Count:          3,
			Datacenters:    []string{"eu-west-1a", "eu-west-1b"},
			Namespace:      "apps",
			Region:         "eu",
			Driver:         "raw_exec",
			StickydCommand: "/usr/local/bin/stickyd",
			ConsulAddr:     "10.0.0.5:8500",
			ServerService:  "stickyd-eu",
			CPU:            1000,
			MemoryMB:       2048,
			Env:            map[string]string{"APP_MODE": "production", "LOG_FORMAT": "json"},
			DiskMB:         4096,
			NodePool:       "default",
			DistinctHosts:  true,
		},
		"scaling_consul_token": {
			Group:       "chat",
			Bundle:      testBundle,
			Archive:     "http://bundles.service.consul:4660",
			Count:       2,
			MaxCount:    6,
			Stickyd:     Artifact{Source: "https://releases.example.com/stickyd.tar.gz"},
			ConsulAddr:  "127.0.0.1:8501",
			ConsulToken: `a"b\c{{d}}${e}%{f}`,
		},
	}
	for name, g := range cases {
		t.Run(name, func(t *testing.T) {
			job, err := Render(g)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			// The JSON holds the host.hcl template as one string; its
			// text has a golden file of its own, to be read.
			compareGolden(t, name+".golden.json", goldenJSON(t, job))
			tmpl := job.TaskGroups[0].Tasks[0].Templates[0].EmbeddedTmpl
			compareGolden(t, name+".host.hcl.golden", []byte(*tmpl))
		})
	}
}

// compareGolden compares got with testdata/<name>, which -update rewrites.
func compareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("rendering differs from %s (run with -update to accept):\n%s", file, got)
	}
}

func TestRenderDeterministic(t *testing.T) {
	g := validJob()
	g.Env = map[string]string{"A": "1", "B": "2", "C": "3"}
	a, err := Render(g)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Render(g)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(goldenJSON(t, a), goldenJSON(t, b)) {
		t.Fatal("two renderings of one GroupJob differ")
	}

	g.Bundle = "sha256:" + strings.Repeat("ab", 32)
	c, err := Render(g)
	if err != nil {
		t.Fatal(err)
	}
	if a.Meta[MetaSpec] == c.Meta[MetaSpec] {
		t.Fatalf("a new bundle kept the spec hash %s", a.Meta[MetaSpec])
	}
}

func TestRenderDefaults(t *testing.T) {
	job, err := Render(validJob())
	if err != nil {
		t.Fatal(err)
	}
	if *job.ID != "stickyd-group-web" || JobID("web") != *job.ID {
		t.Errorf("job ID %q", *job.ID)
	}
	if len(job.Datacenters) != 1 || job.Datacenters[0] != "dc1" {
		t.Errorf("datacenters %v", job.Datacenters)
	}
	if job.Namespace != nil || job.Region != nil {
		t.Errorf("namespace %v, region %v: want the client's", job.Namespace, job.Region)
	}
	tg := job.TaskGroups[0]
	if *tg.Count != 2 || tg.Scaling != nil {
		t.Errorf("count %d, scaling %+v: want 2 and none", *tg.Count, tg.Scaling)
	}
	if len(tg.Spreads) != 1 || tg.Spreads[0].Attribute != "${node.unique.id}" || len(tg.Constraints) != 0 {
		t.Errorf("spreads %+v, constraints %+v: want spread over nodes, no hard constraint", tg.Spreads, tg.Constraints)
	}
	if *tg.EphemeralDisk.SizeMB != DefaultDiskMB {
		t.Errorf("ephemeral disk %d MB", *tg.EphemeralDisk.SizeMB)
	}
	task := tg.Tasks[0]
	if task.Driver != "exec" || *task.Resources.CPU != 500 || *task.Resources.MemoryMB != 512 {
		t.Errorf("driver %q, cpu %d, memory %d", task.Driver, *task.Resources.CPU, *task.Resources.MemoryMB)
	}
	if task.Config["command"] != "local/stickyd" {
		t.Errorf("command %v", task.Config["command"])
	}
	// No secret in the job: the token comes from the job's variable.
	if _, ok := task.Env["STICKYD_TOKEN"]; ok {
		t.Errorf("STICKYD_TOKEN in the job's env: %q", task.Env["STICKYD_TOKEN"])
	}
	if len(task.Templates) != 3 || *task.Templates[2].DestPath != "secrets/consul.token" || *task.Templates[2].Perms != "0600" ||
		!strings.Contains(*task.Templates[2].EmbeddedTmpl, `.consul_token`) {
		t.Errorf("consul token template %+v", task.Templates[2])
	}
	if *task.Templates[1].DestPath != "secrets/admin.token" || *task.Templates[1].Perms != "0600" ||
		!strings.Contains(*task.Templates[1].EmbeddedTmpl, `nomadVar "nomad/jobs/stickyd-group-web"`) {
		t.Errorf("secrets template %+v", task.Templates[len(task.Templates)-1])
	}
	if job.Meta[MetaWorkers] != "1" || job.Meta[MetaBundle] != testBundle || job.Meta[MetaGroup] != "web" {
		t.Errorf("meta %v", job.Meta)
	}
	art := task.Artifacts[0]
	hex := strings.TrimPrefix(testBundle, "sha256:")
	if *art.GetterSource != "http://bundles.service.consul:4660/"+hex+".tar.gz" {
		t.Errorf("bundle source %q", *art.GetterSource)
	}
	if *art.RelativeDest != "local/bundles/"+hex+".tar.gz" || *art.GetterMode != "file" {
		t.Errorf("bundle destination %q mode %q", *art.RelativeDest, *art.GetterMode)
	}
	if art.GetterOptions["checksum"] != testBundle || art.GetterOptions["archive"] != "false" {
		t.Errorf("bundle options %v", art.GetterOptions)
	}
}

func TestRenderErrors(t *testing.T) {
	cases := []struct {
		name   string
		change func(g *GroupJob)
		want   string
	}{
		{"empty group", func(g *GroupJob) { g.Group = "" }, `group name ""`},
		{"bad group", func(g *GroupJob) { g.Group = "Web!" }, `group name "Web!"`},
		{"long group", func(g *GroupJob) { g.Group = strings.Repeat("a", 64) }, "use 1-63"},
		{"no bundle", func(g *GroupJob) { g.Bundle = "" }, "bundle: bad bundle digest: empty"},
		{"short bundle", func(g *GroupJob) { g.Bundle = "sha256:9f86d0" }, "abbreviated"},
		{"md5 bundle", func(g *GroupJob) { g.Bundle = "md5:d41d8cd98f00b204e9800998ecf8427e" }, "only sha256"},
		{"no archive", func(g *GroupJob) { g.Archive = "" }, "archive is empty"},
		{"file archive", func(g *GroupJob) { g.Archive = "/srv/bundles" }, "want an http:// or https:// URL"},
		{"archive query", func(g *GroupJob) { g.Archive = "http://a.example/?x=1" }, "must not have a query"},
		{"negative workers", func(g *GroupJob) { g.Workers = -1 }, "workers is -1"},
		{"negative count", func(g *GroupJob) { g.Count = -2 }, "count is -2: want at least 1"},
		{"max below count", func(g *GroupJob) { g.Count, g.MaxCount = 3, 2 }, "max_count 2 is below count 3"},
		{"negative cpu", func(g *GroupJob) { g.CPU = -1 }, "cpu is -1"},
		{"negative memory", func(g *GroupJob) { g.MemoryMB = -1 }, "memory_mb is -1"},
		{"empty datacenter", func(g *GroupJob) { g.Datacenters = []string{"dc1", ""} }, "empty datacenter"},
		{"bad driver", func(g *GroupJob) { g.Driver = "docker" }, `driver "docker": want exec or raw_exec`},
		{"no stickyd", func(g *GroupJob) { g.Stickyd = Artifact{} }, "no stickyd binary"},
		{"both stickyds", func(g *GroupJob) { g.StickydCommand = "/usr/bin/stickyd" }, "either a stickyd artifact or a stickyd command, not both"},
		{"checksum only", func(g *GroupJob) { g.Stickyd = Artifact{Checksum: "sha256:00"} }, "checksum but no source"},
		{"bad checksum", func(g *GroupJob) { g.Stickyd.Checksum = "abcdef" }, `checksum "abcdef": want type:value`},
		{"relative command", func(g *GroupJob) { g.Stickyd, g.StickydCommand = Artifact{}, "bin/stickyd" }, "want an absolute path"},
		{"negative disk", func(g *GroupJob) { g.DiskMB = -1 }, "disk_mb is -1"},
		{"bad env name", func(g *GroupJob) { g.Env = map[string]string{"1X": "y"} }, `env "1X": not a variable name`},
		{"env token", func(g *GroupJob) { g.Env = map[string]string{"STICKYD_TOKEN": "y"} }, "set from the admin token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := validJob()
			tc.change(&g)
			job, err := Render(g)
			if err == nil {
				t.Fatalf("Render gave a job, want an error with %q", tc.want)
			}
			if job != nil {
				t.Errorf("Render gave a job with its error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestKeepCounts(t *testing.T) {
	g := validJob()
	g.Count, g.MaxCount = 2, 5
	job, err := Render(g)
	if err != nil {
		t.Fatal(err)
	}
	running := func(n int) *api.Job {
		return &api.Job{TaskGroups: []*api.TaskGroup{{Name: new(TaskGroupName), Count: new(n)}}}
	}
	for _, tc := range []struct{ running, want int }{
		{2, 2}, {4, 4}, {5, 5}, {1, 2}, {6, 2},
	} {
		got := keepCounts(job, running(tc.running))
		if n := *got.TaskGroups[0].Count; n != tc.want {
			t.Errorf("running %d: count %d, want %d", tc.running, n, tc.want)
		}
	}
	if n := *job.TaskGroups[0].Count; n != 2 {
		t.Errorf("keepCounts changed its argument: count %d", n)
	}

	// Without a scaling block the rendered count wins.
	g.MaxCount = 0
	if job, err = Render(g); err != nil {
		t.Fatal(err)
	}
	if n := *keepCounts(job, running(4)).TaskGroups[0].Count; n != 2 {
		t.Errorf("unscaled job: count %d, want 2", n)
	}
}
