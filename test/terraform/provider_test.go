// Package terraform_test drives the stickyd Terraform provider with the real
// terraform binary against a real stickyd agent: the example in
// terraform/provider-example is planned, applied, changed, imported and
// destroyed, and every step is checked through the admin API.
package terraform_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// providerSource is the provider's source address in required_providers
// and dev_overrides (internal/tfprovider.Address).
const providerSource = "stickyd.local/stickyd/stickyd"

const adminToken = "terraform-e2e-token"

// group and rule are the parts of the admin API's answers the test checks.
type group struct {
	Name        string   `json:"name"`
	Runtime     string   `json:"runtime"`
	Builtin     string   `json:"builtin"`
	Workers     int      `json:"workers"`
	MemoryMaxMB int      `json:"memory_max_mb"`
	Created     uint64   `json:"created"`
	Source      string   `json:"source"`
	WorkerIDs   []string `json:"worker_ids"`
}

type rule struct {
	ID    string `json:"id"`
	Group string `json:"group"`
	User  string `json:"user,omitempty"`
	Attr  string `json:"attr,omitempty"`
	Value string `json:"value,omitempty"`
}

func TestProviderExample(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Skip("terraform is not on PATH; this test runs the real terraform binary")
	}
	bin := t.TempDir()
	stickyd := goBuild(t, filepath.Join(bin, "stickyd"), "github.com/stickyd/stickyd/cmd/stickyd")
	goBuild(t, filepath.Join(bin, "provider", "terraform-provider-stickyd"), "github.com/stickyd/stickyd/cmd/terraform-provider-stickyd")
	admin, front := startAgent(t, stickyd)
	tf := newTerraform(t, filepath.Join(bin, "provider"), "../../terraform/provider-example", admin)
	// maria is at work before the canary exists.
	loginAt(t, front, "maria")
	if u, code := getJSON[struct{ Worker string }](t, admin, "/v1/users/maria"); code != http.StatusOK || !strings.HasPrefix(u.Worker, "demo-") {
		t.Fatalf("maria before the apply: %d %+v, want her on the demo group", code, u)
	}

	// Plan: the group, two rules and a maintenance window to add, nothing
	// done yet.
	out := tf.run(t, 0, "plan", "-var", "canary_workers=1")
	if !strings.Contains(out, "Plan: 4 to add, 0 to change, 0 to destroy.") {
		t.Fatalf("plan:\n%s", out)
	}
	if _, code := getJSON[struct{}](t, admin, "/v1/groups/canary"); code != http.StatusNotFound {
		t.Fatalf("plan created the group (GET answered %d)", code)
	}

	// Apply: the group and the rules are in the catalog as written, and
	// maria, whom a rule of the same apply sends to the new group, is
	// there when it returns (the group waits for its workers first).
	tf.run(t, 0, "apply", "-auto-approve", "-var", "canary_workers=1")
	first := checkCanary(t, admin, 1)
	if u, _ := getJSON[struct{ Worker string }](t, admin, "/v1/users/maria"); !slices.Contains(first.WorkerIDs, u.Worker) {
		t.Fatalf("after the apply maria lives on %q, not on a canary worker %v", u.Worker, first.WorkerIDs)
	}
	checkRules(t, admin, true)
	checkWindow(t, admin, true)
	tf.run(t, 0, "plan", "-detailed-exitcode", "-var", "canary_workers=1") // 0: no changes

	// A changed recipe replaces the group, and the rules with it (the API
	// refuses to retire a group a rule sends people to).
	out = tf.run(t, 0, "apply", "-auto-approve", "-var", "canary_workers=2")
	if !strings.Contains(out, "Apply complete! Resources: 3 added, 0 changed, 3 destroyed.") {
		t.Fatalf("apply with workers = 2:\n%s", out)
	}
	second := checkCanary(t, admin, 2)
	if second.Created == first.Created {
		t.Errorf("the group was not replaced: created at index %d both times", first.Created)
	}
	checkRules(t, admin, true)
	tf.run(t, 0, "plan", "-detailed-exitcode", "-var", "canary_workers=2")

	// Import by name and by id: forgotten, imported, and no change planned.
	tf.run(t, 0, "state", "rm", "stickyd_group.canary", "stickyd_assignment.qa")
	tf.run(t, 0, "import", "-var", "canary_workers=2", "stickyd_group.canary", "canary")
	tf.run(t, 0, "import", "-var", "canary_workers=2", "stickyd_assignment.qa", "qa-canary")
	tf.run(t, 0, "plan", "-detailed-exitcode", "-var", "canary_workers=2")

	// A rule changed behind Terraform's back is put back.
	putRule(t, admin, "qa-canary", `{"group": "canary", "attr": "team", "value": "ops"}`)
	out = tf.run(t, 2, "plan", "-detailed-exitcode", "-var", "canary_workers=2")
	if !strings.Contains(out, "Plan: 0 to add, 1 to change, 0 to destroy.") {
		t.Fatalf("plan after the rule drifted:\n%s", out)
	}
	tf.run(t, 0, "apply", "-auto-approve", "-var", "canary_workers=2")
	checkRules(t, admin, true)

	// Destroy: the rules first, then the group; nothing is left.
	tf.run(t, 0, "destroy", "-auto-approve", "-var", "canary_workers=2")
	if _, code := getJSON[struct{}](t, admin, "/v1/groups/canary"); code != http.StatusNotFound {
		t.Errorf("GET /v1/groups/canary after destroy answered %d, want 404", code)
	}
	checkRules(t, admin, false)
	checkWindow(t, admin, false)
}

// checkWindow checks that the example's maintenance window on db-a is
// open as written, or closed.
func checkWindow(t *testing.T, admin string, open bool) {
	t.Helper()
	type window struct {
		Backend string `json:"backend"`
		Reason  string `json:"reason"`
		MaxWait string `json:"max_wait"`
		Source  string `json:"source"`
	}
	v, code := getJSON[struct{ Backends []window }](t, admin, "/v1/maintenance")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/maintenance answered %d", code)
	}
	want := []window{{Backend: "db-a", Reason: "upgrading to PostgreSQL 16.4", MaxWait: "45s", Source: "raft"}}
	if !open {
		want = nil
	}
	if len(v.Backends) != len(want) || (open && v.Backends[0] != want[0]) {
		t.Fatalf("maintenance windows %+v, want %+v", v.Backends, want)
	}
}

// checkCanary checks the canary group as the API shows it, waits until this
// agent runs its workers, and returns it.
func checkCanary(t *testing.T, admin string, workers int) group {
	t.Helper()
	var g group
	waitFor(t, 30*time.Second, func() error {
		v, code := getJSON[struct{ Group group }](t, admin, "/v1/groups/canary")
		if code != http.StatusOK {
			return fmt.Errorf("GET /v1/groups/canary answered %d", code)
		}
		g = v.Group
		if len(g.WorkerIDs) != workers {
			return fmt.Errorf("the agent runs %d workers of canary (%v), want %d", len(g.WorkerIDs), g.WorkerIDs, workers)
		}
		return nil
	})
	if g.Runtime != "builtin" || g.Builtin != "demo" || g.Workers != workers || g.MemoryMaxMB != 512 || g.Source != "catalog" {
		t.Fatalf("group canary is %+v, want the builtin demo, %d workers, memory_max_mb 512, from the catalog", g, workers)
	}
	return g
}

// checkRules checks that the example's two rules are there, or gone.
func checkRules(t *testing.T, admin string, there bool) {
	t.Helper()
	rules, code := getJSON[[]rule](t, admin, "/v1/rules")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/rules answered %d", code)
	}
	for _, want := range []rule{
		{ID: "maria-canary", Group: "canary", User: "maria"},
		{ID: "qa-canary", Group: "canary", Attr: "team", Value: "qa"},
	} {
		i := slices.IndexFunc(rules, func(r rule) bool { return r.ID == want.ID })
		switch {
		case there && i < 0:
			t.Errorf("no rule %s in %+v", want.ID, rules)
		case there && rules[i] != want:
			t.Errorf("rule %s is %+v, want %+v", want.ID, rules[i], want)
		case !there && i >= 0:
			t.Errorf("rule %s is still there: %+v", want.ID, rules[i])
		}
	}
}

// goBuild builds pkg into out and returns out.
func goBuild(t *testing.T, out, pkg string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if b, err := exec.CommandContext(ctx, "go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	return out
}

// startAgent runs `stickyd agent` with the demo application built in, its
// front and admin API on ports the OS picks, and returns the admin API's
// URL (an agent with a configuration of its own, as Terraform users run).
func startAgent(t *testing.T, stickyd string) (admin, front string) {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "agent.hcl")
	writeFile(t, config, fmt.Sprintf(`
name      = "terraform-e2e"
log_level = "warn"
front {
  address = "127.0.0.1:0"
}
admin {
  address = "127.0.0.1:0"
  token   = %q
}
group "demo" {
  workers = 1
  builtin = "demo"
}
`, adminToken))
	var out syncBuffer
	cmd := exec.Command(stickyd, "agent", "-config", config)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "STICKYD_TOKEN=")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("stickyd agent exited: %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("stickyd agent did not stop within 30s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("stickyd agent output:\n%s", out.String())
		}
	})

	addrRE := regexp.MustCompile(`admin API on (http://\S+)`)
	frontRE := regexp.MustCompile(`serving on (http://\S+)`)
	waitFor(t, time.Minute, func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("stickyd agent exited (%v):\n%s", err, out.String())
		default:
		}
		m := addrRE.FindStringSubmatch(out.String())
		if m == nil {
			return errors.New("the agent has not said where its admin API is")
		}
		admin = m[1]
		if m := frontRE.FindStringSubmatch(out.String()); m != nil {
			front = m[1]
		}
		return nil
	})
	return admin, front
}

// loginAt signs user in on the demo site at front, as a browser does.
func loginAt(t *testing.T, front, user string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(front + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = c.PostForm(front+"/login", url.Values{"user": {user}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("signing %s in: HTTP %d", user, resp.StatusCode)
	}
}

// terraform runs the terraform binary in a copy of a configuration, with a
// CLI configuration whose dev_overrides install the provider from a
// directory (so there is no terraform init).
type terraform struct {
	dir string
	env []string
}

func newTerraform(t *testing.T, providerDir, example, admin string) *terraform {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(example, "*.tf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no configuration in %s (%v)", example, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, filepath.Base(f)), string(b))
	}
	rc := filepath.Join(t.TempDir(), "terraform.rc")
	writeFile(t, rc, fmt.Sprintf(`
provider_installation {
  dev_overrides {
    %q = %q
  }
  direct {}
}
`, providerSource, providerDir))
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "TF_") || strings.HasPrefix(kv, "STICKYD_")
	})
	env = append(env,
		"TF_CLI_CONFIG_FILE="+rc,
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
		"CHECKPOINT_DISABLE=1",
		"TF_CLI_ARGS_plan=-no-color",
		"TF_CLI_ARGS_apply=-no-color",
		"TF_CLI_ARGS_import=-no-color",
		"TF_CLI_ARGS_destroy=-no-color",
		"TF_VAR_stickyd_address="+admin,
		"STICKYD_TOKEN="+adminToken,
	)
	return &terraform{dir: dir, env: env}
}

// run runs terraform with args and fails unless it exits with code; it
// returns what terraform printed.
func (tf *terraform) run(t *testing.T, code int, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "terraform", args...)
	cmd.Dir, cmd.Env = tf.dir, tf.env
	b, err := cmd.CombinedOutput()
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	if got != code {
		t.Fatalf("terraform %s exited %d, want %d:\n%s", strings.Join(args, " "), got, code, b)
	}
	t.Logf("terraform %s: exit %d", strings.Join(args, " "), got)
	return string(b)
}

// getJSON calls GET path on the admin API and decodes a 200 answer.
func getJSON[T any](t *testing.T, admin, path string) (T, int) {
	t.Helper()
	var v T
	code, body := call(t, admin, http.MethodGet, path, "")
	if code == http.StatusOK {
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
	return v, code
}

// putRule changes a rule directly through the API (detached: the test does
// not follow its moves).
func putRule(t *testing.T, admin, id, body string) {
	t.Helper()
	if code, b := call(t, admin, http.MethodPut, "/v1/rules/"+id+"?detach=true", body); code != http.StatusAccepted {
		t.Fatalf("PUT /v1/rules/%s: %d %s", id, code, b)
	}
}

func call(t *testing.T, admin, method, path, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Stickyd-Token", adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// waitFor polls cond until it returns nil, failing with its last error
// after d.
func waitFor(t *testing.T, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer the agent's output goroutines and the test
// share.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
