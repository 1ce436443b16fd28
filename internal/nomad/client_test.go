package nomad

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2/hclsimple"
	"github.com/hashicorp/nomad/api"

	"github.com/stickyd/stickyd/internal/bundle"
	"github.com/stickyd/stickyd/internal/testagents"
)

// nowhere is a datacenter no node is in: jobs registered there are
// scheduled but never placed, so nothing runs.
const nowhere = "stickyd-test-nowhere"

// unplacedJob is a GroupJob for the registration tests.
func unplacedJob(group string) GroupJob {
	g := validJob()
	g.Group = group
	g.Datacenters = []string{nowhere}
	g.Driver = "raw_exec"
	g.Stickyd, g.StickydCommand = Artifact{}, "/usr/local/bin/stickyd"
	return g
}

func mustRender(t *testing.T, g GroupJob) *api.Job {
	t.Helper()
	job, err := Render(g)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// TestNomadAcceptsJobs has the real Nomad v1.6.3 validate, plan, register,
// list and deregister rendered jobs.
func TestNomadAcceptsJobs(t *testing.T) {
	nomadBin := testagents.Require(t, "nomad")
	consul := testagents.StartConsul(t)
	n := testagents.StartNomad(t, testagents.NomadOptions{ConsulAddr: consul.HTTPAddr})
	c := n.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("validate and plan", func(t *testing.T) {
		for _, name := range []string{"artifact_exec", "command_raw_exec", "scaling_consul_token"} {
			var job api.Job
			b, err := os.ReadFile(filepath.Join("testdata", name+".golden.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &job); err != nil {
				t.Fatal(err)
			}
			// The golden jobs name namespaces and regions this agent has not.
			job.Namespace, job.Region = nil, nil
			resp, _, err := c.Jobs().Validate(&job, nil)
			if err != nil {
				t.Fatalf("validating %s: %v", name, err)
			}
			if len(resp.ValidationErrors) > 0 || resp.Error != "" {
				t.Errorf("nomad refused %s: %v %s", name, resp.ValidationErrors, resp.Error)
			}
			if resp.Warnings != "" {
				t.Logf("%s: warnings: %s", name, resp.Warnings)
			}
			plan, _, err := c.Jobs().Plan(&job, true, nil)
			if err != nil {
				t.Fatalf("planning %s: %v", name, err)
			}
			if plan.Diff == nil || plan.Diff.Type != "Added" {
				t.Errorf("plan of %s: diff %+v, want a new job", name, plan.Diff)
			}

			// The CLI of the same version reads the JSON as a job file.
			file := filepath.Join(t.TempDir(), name+".json")
			if err := os.WriteFile(file, goldenJSON(t, &job), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(ctx, nomadBin, "job", "validate", "-json", file)
			cmd.Env = n.Env()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("nomad job validate -json %s: %v\n%s", name, err, out)
			}
		}
	})

	t.Run("register unchanged keeps the version", func(t *testing.T) {
		job := mustRender(t, unplacedJob("web"))
		eval, err := Register(ctx, c, job)
		if err != nil {
			t.Fatal(err)
		}
		if eval == "" {
			t.Fatal("first registration gave no evaluation")
		}
		v0 := jobVersion(t, c, "web")

		// Unchanged: Register sends nothing. Counted once Nomad's own
		// follow-ups of the first registration (a blocked evaluation for
		// an unplaceable job) have settled.
		evals := len(evaluations(t, c, "web"))
		for settled := 0; settled < 5; {
			time.Sleep(100 * time.Millisecond)
			if n := len(evaluations(t, c, "web")); n != evals {
				evals, settled = n, 0
			} else {
				settled++
			}
		}
		eval, err = Register(ctx, c, mustRender(t, unplacedJob("web")))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(evaluations(t, c, "web")); eval != "" || n != evals {
			t.Errorf("registering an unchanged job made evaluation %q (%d new)", eval, n-evals)
		}
		// Nomad too keeps the version when given the same job directly,
		// but evaluates it again.
		resp, _, err := c.Jobs().Register(mustRender(t, unplacedJob("web")), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("registering the same job directly: evaluation %q, %d evaluations before, %d after",
			resp.EvalID, evals, len(evaluations(t, c, "web")))
		if v := jobVersion(t, c, "web"); v != v0 {
			t.Errorf("unchanged job went from version %d to %d", v0, v)
		}

		// A new bundle is a new version.
		g := unplacedJob("web")
		g.Bundle = "sha256:" + strings.Repeat("0a", 32)
		eval, err = Register(ctx, c, mustRender(t, g))
		if err != nil {
			t.Fatal(err)
		}
		if eval == "" {
			t.Error("registering a changed job made no evaluation")
		}
		if v := jobVersion(t, c, "web"); v != v0+1 {
			t.Errorf("changed job is at version %d, want %d", v, v0+1)
		}
		cur, _, err := c.Jobs().Info(JobID("web"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if cur.Meta[MetaBundle] != g.Bundle {
			t.Errorf("registered bundle %q, want %q", cur.Meta[MetaBundle], g.Bundle)
		}
	})

	t.Run("register keeps a scaled count", func(t *testing.T) {
		g := unplacedJob("chat")
		g.Count, g.MaxCount = 1, 4
		if _, err := Register(ctx, c, mustRender(t, g)); err != nil {
			t.Fatal(err)
		}
		// What an autoscaler does. (Not with the scale API: Nomad refuses
		// it during a deployment, and this one never ends, with no node in
		// its datacenter.)
		scaled := mustRender(t, g)
		scaled.TaskGroups[0].Count = new(3)
		if _, _, err := c.Jobs().Register(scaled, nil); err != nil {
			t.Fatal(err)
		}
		// Unchanged spec: left alone, count included.
		if eval, err := Register(ctx, c, mustRender(t, g)); err != nil || eval != "" {
			t.Fatalf("Register = %q, %v; want nothing done", eval, err)
		}
		g.Bundle = "sha256:" + strings.Repeat("0b", 32)
		job := mustRender(t, g)
		if _, err := Register(ctx, c, job); err != nil {
			t.Fatal(err)
		}
		if n := *job.TaskGroups[0].Count; n != 1 {
			t.Errorf("Register changed the caller's job (count %d)", n)
		}
		if n := groupCount(t, c, "chat"); n != 3 {
			t.Errorf("count after a new bundle is %d, want the scaled 3", n)
		}
		// New bounds that exclude the running count win.
		g.Count, g.MaxCount = 1, 2
		if _, err := Register(ctx, c, mustRender(t, g)); err != nil {
			t.Fatal(err)
		}
		if n := groupCount(t, c, "chat"); n != 1 {
			t.Errorf("count after max 2 is %d, want the new count 1", n)
		}
	})

	t.Run("jobs and deregister", func(t *testing.T) {
		// A job that is not a group's is neither listed nor touched.
		other := mustRender(t, unplacedJob("other"))
		other.ID, other.Name = new("stickyd-groupie"), new("stickyd-groupie")
		if _, _, err := c.Jobs().Register(other, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := Register(ctx, c, other); err == nil {
			t.Error("Register took a job that is not a group job")
		}
		if _, err := Register(ctx, c, mustRender(t, unplacedJob("web"))); err != nil {
			t.Fatal(err)
		}
		if got := listGroups(t, c); !slices.Equal(got, []string{"chat", "web"}) {
			t.Fatalf("Jobs = %v, want [chat web]", got)
		}

		if err := Deregister(ctx, c, "web", false); err != nil {
			t.Fatal(err)
		}
		cur, _, err := c.Jobs().Info(JobID("web"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !*cur.Stop {
			t.Fatal("deregistered job is not stopped")
		}
		// Stopping a stopped job does nothing: no evaluation.
		evals := len(evaluations(t, c, "web"))
		if err := Deregister(ctx, c, "web", false); err != nil {
			t.Fatal(err)
		}
		if n := len(evaluations(t, c, "web")); n != evals {
			t.Errorf("stopping a stopped job made %d evaluations", n-evals)
		}
		// A stopped job is still listed, and registering starts it again.
		if got := listGroups(t, c); !slices.Equal(got, []string{"chat", "web"}) {
			t.Errorf("Jobs = %v after a stop, want [chat web]", got)
		}
		if eval, err := Register(ctx, c, mustRender(t, unplacedJob("web"))); err != nil || eval == "" {
			t.Fatalf("Register of a stopped job = %q, %v; want an evaluation", eval, err)
		}
		if cur, _, _ := c.Jobs().Info(JobID("web"), nil); *cur.Stop {
			t.Error("registered job is still stopped")
		}

		for _, g := range []string{"web", "chat"} {
			if err := Deregister(ctx, c, g, true); err != nil {
				t.Fatal(err)
			}
		}
		if got := listGroups(t, c); len(got) != 0 {
			t.Errorf("Jobs = %v after purging, want none", got)
		}
		if err := Deregister(ctx, c, "web", true); err != nil {
			t.Errorf("purging a missing job: %v", err)
		}
		if err := Deregister(ctx, c, "never-was", false); err != nil {
			t.Errorf("stopping a missing job: %v", err)
		}
		if _, _, err := c.Jobs().Info("stickyd-groupie", nil); err != nil {
			t.Errorf("the other job: %v", err)
		}
	})
}

// TestNomadRendersHostConfig runs a group job on the real Nomad: the
// bundle comes through go-getter from an archive served by bundle.Handler,
// and consul-template writes local/host.hcl. The task's command is a script
// that only waits, as the host role is not what is tested here: the files
// Nomad prepares for it are.
func TestNomadRendersHostConfig(t *testing.T) {
	testagents.Require(t, "nomad")
	consul := testagents.StartConsul(t)
	n := testagents.StartNomad(t, testagents.NomadOptions{ConsulAddr: consul.HTTPAddr})
	c := n.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The archive holds random bytes under their digest: go-getter checks
	// the checksum, not what a bundle is made of.
	content := make([]byte, 4096)
	rand.Read(content)
	sum := sha256.Sum256(content)
	hx := hex.EncodeToString(sum[:])
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, hx+".tar.gz"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/bundles/", http.StripPrefix("/bundles", bundle.Handler(dir, bundle.HandlerOptions{})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	script := filepath.Join(t.TempDir(), "stickyd")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncp \"$NOMAD_SECRETS_DIR/admin.token\" \"$NOMAD_TASK_DIR/token.seen\"\ncp \"$NOMAD_SECRETS_DIR/consul.token\" \"$NOMAD_TASK_DIR/consul.seen\"\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	g := GroupJob{
		Group:          "web",
		Bundle:         "sha256:" + hx,
		Archive:        srv.URL + "/bundles",
		Driver:         "raw_exec",
		StickydCommand: script,
		ConsulAddr:     consul.HTTPAddr,
		ConsulToken:    `c"t{{x}}${NOMAD_TASK_DIR}`,
		CPU:            100,
		MemoryMB:       64,
		Count:          1,
	}
	const token = `tok{{ env "HOME" }}"\%{x}`
	if err := PutSecrets(ctx, c, "web", "", "", Secrets{AdminToken: token, ConsulToken: g.ConsulToken}); err != nil {
		t.Fatal(err)
	}
	if err := PutSecrets(ctx, c, "web", "", "", Secrets{AdminToken: token, ConsulToken: g.ConsulToken}); err != nil { // unchanged: no write
		t.Fatal(err)
	}
	if _, err := Register(ctx, c, mustRender(t, g)); err != nil {
		t.Fatal(err)
	}

	alloc := waitRunning(t, c, JobID("web"))
	var text []byte
	waitFor(t, time.Minute, func() error {
		r, err := c.AllocFS().Cat(alloc, "host/local/host.hcl", nil)
		if err != nil {
			return err
		}
		defer r.Close()
		text, err = io.ReadAll(r)
		return err
	})
	var f hostFile
	if err := hclsimple.Decode("host.hcl", text, nil, &f); err != nil {
		t.Fatalf("decoding host.hcl as Nomad wrote it: %v\n%s", err, text)
	}
	ports := map[string]string{}
	for _, p := range alloc.AllocatedResources.Shared.Ports {
		ports[p.Label] = fmt.Sprintf("%s:%d", p.HostIP, p.Value)
	}
	want := map[string][2]string{
		"name":           {f.Name, JobID("web") + "-0"},
		"admin.token":    {f.Admin.Token, ""},
		"admin.address":  {f.Admin.Address, ports["admin"]},
		"host.raft_addr": {f.Host.RaftAddr, ports["raft"]},
		"host.rpc_addr":  {f.Host.RPCAddr, ports["rpc"]},
		"consul.address": {f.Consul.Address, consul.HTTPAddr},
		"consul.token":   {f.Consul.Token, ""},
		"server_service": {f.Consul.ServerService, DefaultServerService},
	}
	for k, v := range want {
		if v[0] != v[1] {
			t.Errorf("%s = %q, want %q", k, v[0], v[1])
		}
	}
	if !slices.Equal(f.Host.Groups, []string{"web"}) || f.Server.Enabled || f.Front.Enabled {
		t.Errorf("host.hcl: %+v", f)
	}
	if !strings.HasSuffix(f.Admin.TokenFile, "/host/secrets/admin.token") {
		t.Errorf("admin token_file %q", f.Admin.TokenFile)
	}
	if !strings.HasSuffix(f.DataDir, "/alloc/data") || !strings.HasSuffix(f.Bundles.Archive, "/host/local/bundles") {
		t.Errorf("data_dir %q, bundles archive %q", f.DataDir, f.Bundles.Archive)
	}
	// The token reached the task's environment from the variable, and
	// is nowhere in the job Nomad shows.
	var seen []byte
	waitFor(t, time.Minute, func() error {
		r, err := c.AllocFS().Cat(alloc, "host/local/token.seen", nil)
		if err != nil {
			return err
		}
		defer r.Close()
		seen, err = io.ReadAll(r)
		return err
	})
	if string(seen) != token {
		t.Errorf("the task's admin token file holds %q, want %q", seen, token)
	}
	if !strings.HasSuffix(f.Consul.TokenFile, "/host/secrets/consul.token") {
		t.Errorf("consul token_file %q", f.Consul.TokenFile)
	}
	waitFor(t, time.Minute, func() error {
		r, err := c.AllocFS().Cat(alloc, "host/local/consul.seen", nil)
		if err != nil {
			return err
		}
		defer r.Close()
		seen, err = io.ReadAll(r)
		return err
	})
	if string(seen) != g.ConsulToken {
		t.Errorf("the task's consul token file holds %q, want %q", seen, g.ConsulToken)
	}
	registered, _, err := c.Jobs().Info(JobID("web"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(registered); strings.Contains(string(b), "tok{{") || strings.Contains(string(b), "{{x}}${NOMAD_TASK_DIR}") {
		t.Errorf("the registered job holds the admin or the consul token:\n%s", b)
	}
	fi, _, err := c.AllocFS().Stat(alloc, "host/local/host.hcl", nil)
	if err != nil {
		t.Fatal(err)
	}
	if fi.FileMode != "-rw-------" {
		t.Errorf("host.hcl mode %s, want -rw-------", fi.FileMode)
	}

	// The bundle is in the directory archive host.hcl names, as fetched.
	r, err := c.AllocFS().Cat(alloc, "host/local/bundles/"+hx+".tar.gz", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, content) {
		t.Errorf("bundle in the task directory has %d bytes, not the archive's %d", len(got), len(content))
	}
}

// jobVersion returns the version of a group's job.
func jobVersion(t *testing.T, c *api.Client, group string) uint64 {
	t.Helper()
	job, _, err := c.Jobs().Info(JobID(group), nil)
	if err != nil {
		t.Fatal(err)
	}
	return *job.Version
}

// evaluations lists the evaluations of a group's job.
func evaluations(t *testing.T, c *api.Client, group string) []*api.Evaluation {
	t.Helper()
	evals, _, err := c.Jobs().Evaluations(JobID(group), nil)
	if err != nil {
		t.Fatal(err)
	}
	return evals
}

// groupCount returns the count of a group job's task group.
func groupCount(t *testing.T, c *api.Client, group string) int {
	t.Helper()
	job, _, err := c.Jobs().Info(JobID(group), nil)
	if err != nil {
		t.Fatal(err)
	}
	return *job.TaskGroups[0].Count
}

func listGroups(t *testing.T, c *api.Client) []string {
	t.Helper()
	groups, err := Jobs(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return groups
}

// waitRunning waits for a running allocation of a job and returns it.
func waitRunning(t *testing.T, c *api.Client, jobID string) *api.Allocation {
	t.Helper()
	var alloc *api.Allocation
	waitFor(t, 90*time.Second, func() error {
		stubs, _, err := c.Jobs().Allocations(jobID, false, nil)
		if err != nil {
			return err
		}
		for _, s := range stubs {
			if s.ClientStatus == api.AllocClientStatusRunning {
				alloc, _, err = c.Allocations().Info(s.ID, nil)
				return err
			}
		}
		var states []string
		for _, s := range stubs {
			var events []string
			for task, ts := range s.TaskStates {
				for _, e := range ts.Events {
					if e.DisplayMessage != "" {
						events = append(events, task+": "+e.Type+": "+e.DisplayMessage)
					}
				}
			}
			states = append(states, fmt.Sprintf("%s %s %v", s.ID[:8], s.ClientStatus, events))
		}
		return fmt.Errorf("no running allocation: %v", states)
	})
	return alloc
}

// waitFor polls cond until it returns nil, failing the test at the deadline.
func waitFor(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done after %s: %v", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
