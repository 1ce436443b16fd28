// Package deploy tests stickyd deployed the HashiCorp way, against real
// Consul and Nomad dev agents (built by `make tools`): the servers from
// jobs/stickyd.nomad, each group a Nomad job of hosts, the front found in
// Consul, the placement registry in Consul KV, promotion from the CLI.
package deploy

import (
	"archive/tar"
	"compress/gzip"
	"context"
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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/stickyd/stickyd/internal/bundle"
	"github.com/stickyd/stickyd/internal/testagents"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

const (
	adminToken = "deploy-test-token-0123456789abcdef"
	cookieKey  = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	// The agents run without ACLs, which take any token: these prove the
	// tokens travel through the Nomad variables and never into a job.
	consulToken = "deploy-test-consul-token-5f0c9a"
	nomadToken  = "deploy-test-nomad-token-77b1e2"
	users       = 24
)

// TestNomadDeployment is the deployment's acceptance: three servers from
// jobs/stickyd.nomad elect a leader; a group created with the CLI becomes a
// Nomad job of hosts; people type through fronts found in Consul; the
// placement registry in Consul KV says where they really are; a promotion to
// a second group moves them all with no failed request and no lost or
// doubled delta; the retired group's job is purged; nothing is left running.
func TestNomadDeployment(t *testing.T) {
	testagents.Require(t, "consul")
	testagents.Require(t, "nomad")
	root := t.TempDir()

	stickyd := benchkit.BuildStickyd(t)
	archiveDir, digests := benchkit.PackBundles(t, stickyd, "counter", "counter/cmd/counter-worker", nil, nil)
	dist := serveDist(t, stickyd, archiveDir)

	consul := testagents.StartConsul(t)
	nomad := testagents.StartNomad(t, testagents.NomadOptions{ConsulAddr: consul.HTTPAddr})
	cc := consul.Client()
	dumpLogsOnFailure(t, nomad, "stickyd", "server")

	// The servers: validated, planned and run with the real nomad CLI,
	// their secrets in the job's Nomad variable.
	vars := filepath.Join(root, "site.vars.hcl")
	// Mutual TLS between every agent (servers and the group jobs' hosts),
	// the certificates made with stickyd tls and kept in the variable.
	writeFile(t, vars, siteVars(dist, consul.HTTPAddr, nomad.Addr, "tls = true\n"))
	jobfile, _ := filepath.Abs("../../jobs/stickyd.nomad")
	putSecrets(t, nomad, tlsItems(t, stickyd, filepath.Join(root, "tls"))...)
	run(t, nomad.Env(), 0, testagents.Require(t, "nomad"), "job", "validate", "-var-file", vars, jobfile)
	run(t, nomad.Env(), 1, testagents.Require(t, "nomad"), "job", "plan", "-var-file", vars, jobfile) // 1: allocations to create
	run(t, nomad.Env(), 0, testagents.Require(t, "nomad"), "job", "run", "-detach", "-var-file", vars, jobfile)

	servers := waitService(t, cc, "stickyd-server", 3, 3*time.Minute)
	admin := "http://" + servers[0]
	waitLeader(t, admin, 3, time.Minute)
	t.Logf("servers up: %v", servers)
	if m := fetchMetrics(t, admin); !strings.Contains(m, "stickyd_tls_certificate_expiry_seconds") {
		t.Fatal("the servers run without TLS")
	}
	cli := func(args ...string) string {
		return run(t, []string{"STICKYD_ADDR=" + admin, "STICKYD_TOKEN=" + adminToken}, 0, stickyd, args...)
	}

	// Group v1 becomes a Nomad job of hosts.
	cli("group", "create", "-bundle", digests[0], "-workers", "2", "v1")
	waitJob(t, nomad.Env(), "stickyd-group-v1", time.Minute)
	checkNoSecrets(t, nomad, "stickyd")
	checkNoSecrets(t, nomad, "stickyd-group-v1")
	// The leader handed the group job its tokens through the group's own
	// variable (the hosts render them from it).
	items, _, err := nomad.Client().Variables().GetVariableItems("nomad/jobs/stickyd-group-v1", nil)
	if err != nil || items["admin_token"] != adminToken || items["consul_token"] != consulToken {
		t.Fatalf("the group job's variable: %v %v", items != nil, err)
	}
	waitWorkers(t, admin, "v1", 2, 3*time.Minute)
	cli("group", "promote", "v1")

	// People type through the fronts Consul lists.
	fronts := waitService(t, cc, "stickyd-front", 3, time.Minute)
	typing := startTyping(t, fronts)
	typing.waitRounds(t, 5)
	checkPlacement(t, consul.HTTPAddr, admin, typing, "v1")

	// Group v2, then the promotion with the CLI while everyone types.
	cli("group", "create", "-bundle", digests[1], "-workers", "2", "v2")
	waitJob(t, nomad.Env(), "stickyd-group-v2", time.Minute)
	waitWorkers(t, admin, "v2", 2, 3*time.Minute)
	// The promotion finds a server through Consul, as an operator would.
	out := run(t, []string{"STICKYD_ADDR=consul://stickyd-server", "CONSUL_HTTP_ADDR=" + consul.HTTPAddr, "STICKYD_TOKEN=" + adminToken},
		0, stickyd, "group", "promote", "v2")
	t.Logf("promote: %s", lastLine(out))
	typing.waitRounds(t, 5)
	checkPlacement(t, consul.HTTPAddr, admin, typing, "v2")

	// Retiring v1 purges its job.
	cli("group", "retire", "v1")
	waitNoJob(t, nomad, "stickyd-group-v1", time.Minute)

	typing.stop(t)
	t.Logf("%d people typed %d messages through %d fronts; 0 failed", users, typing.total.Load(), len(fronts))

	// Down: the servers first (else the leader registers v2 again), then
	// the group's job; testagents then stops the agents.
	run(t, nomad.Env(), 0, testagents.Require(t, "nomad"), "job", "stop", "-detach", "-purge", "stickyd")
	waitNoJob(t, nomad, "stickyd", 2*time.Minute)
	run(t, nomad.Env(), 0, testagents.Require(t, "nomad"), "job", "stop", "-detach", "-purge", "stickyd-group-v2")
	waitNoJob(t, nomad, "stickyd-group-v2", 2*time.Minute)
	checkNoOrphans(t, nomad.Dir)
}

// siteVars is the operator's site.vars.hcl: no secret in it (they are in
// the job's Nomad variable, putSecrets); extra adds lines.
func siteVars(d dist, consulAddr, nomadAddr, extra string) string {
	return fmt.Sprintf(`
driver           = "raw_exec"
stickyd_artifact = %q
stickyd_checksum = %q
bundle_archive   = %q
consul_address   = %q
nomad_address    = %q
log_level        = "debug"
`, d.stickyd, d.checksum, d.archive, consulAddr, nomadAddr) + extra
}

// putSecrets writes the servers' secrets as docs/deploy-nomad.md says:
// nomad var put nomad/jobs/stickyd admin_token=... cookie_key=...
func putSecrets(t *testing.T, n *testagents.Nomad, extra ...string) {
	t.Helper()
	run(t, n.Env(), 0, testagents.Require(t, "nomad"), append([]string{"var", "put", "nomad/jobs/stickyd",
		"admin_token=" + adminToken, "cookie_key=" + cookieKey, "consul_token=" + consulToken, "nomad_token=" + nomadToken}, extra...)...)
}

// tlsItems makes a CA, a server and a host certificate with stickyd tls in
// dir, as docs/deploy-nomad.md says, and returns them as the variable's
// items (nomad var put reads item=@file).
func tlsItems(t *testing.T, stickyd, dir string) []string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ca, caKey := filepath.Join(dir, "stickyd-agent-ca.pem"), filepath.Join(dir, "stickyd-agent-ca-key.pem")
	run(t, nil, 0, stickyd, "tls", "ca", "create", "-dir", dir)
	run(t, nil, 0, stickyd, "tls", "cert", "create", "-server", "-ca", ca, "-key", caKey, "-dir", dir)
	run(t, nil, 0, stickyd, "tls", "cert", "create", "-host", "-ca", ca, "-key", caKey, "-dir", dir)
	for _, k := range []string{"global-server-stickyd-0-key.pem", "global-host-stickyd-0-key.pem", "global-server-stickyd-0.pem", "stickyd-agent-ca.pem"} {
		b, err := os.ReadFile(filepath.Join(dir, k))
		if err != nil {
			t.Fatal(err)
		}
		// A line of the key's (or certificate's) body: no job may show it.
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		keyLines[k] = lines[len(lines)/2]
	}
	f := func(name string) string { return "@" + filepath.Join(dir, name) }
	return []string{"tls_ca=" + f("stickyd-agent-ca.pem"),
		"tls_server_cert=" + f("global-server-stickyd-0.pem"), "tls_server_key=" + f("global-server-stickyd-0-key.pem"),
		"tls_host_cert=" + f("global-host-stickyd-0.pem"), "tls_host_key=" + f("global-host-stickyd-0-key.pem")}
}

// keyLines holds a line of each TLS key and certificate tlsItems made, which
// checkNoSecrets looks for too.
var keyLines = map[string]string{}

// checkNoSecrets fails if `nomad job inspect` of job shows a token or a key.
func checkNoSecrets(t *testing.T, n *testagents.Nomad, job string) {
	t.Helper()
	out := run(t, n.Env(), 0, testagents.Require(t, "nomad"), "job", "inspect", job)
	secrets := map[string]string{"admin token": adminToken, "cookie key": cookieKey, "consul token": consulToken, "nomad token": nomadToken}
	for k, line := range keyLines {
		secrets["TLS file "+k] = line
	}
	for name, secret := range secrets {
		if strings.Contains(out, secret) {
			t.Fatalf("nomad job inspect %s shows the %s", job, name)
		}
	}
}

// dist is what the Nomad clients fetch over HTTP: the stickyd tarball and
// the bundle archive.
type dist struct {
	stickyd, checksum, archive string
}

func serveDist(t *testing.T, stickyd, archiveDir string) dist {
	t.Helper()
	tarball := filepath.Join(t.TempDir(), "stickyd.tar.gz")
	f, err := os.Create(tarball)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(stickyd)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "stickyd", Mode: 0o755, Size: int64(len(bin)), ModTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bin); err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface{ Close() error }{tw, gz, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(tarball)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	mux := http.NewServeMux()
	mux.Handle("/bundles/", http.StripPrefix("/bundles", bundle.Handler(archiveDir, bundle.HandlerOptions{})))
	mux.HandleFunc("/dist/stickyd.tar.gz", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, tarball) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return dist{stickyd: srv.URL + "/dist/stickyd.tar.gz", checksum: "sha256:" + hex.EncodeToString(sum[:]), archive: srv.URL + "/bundles"}
}

// typing is every person typing in their counter page, round after round;
// each answer is checked (benchkit.Page.Inc: the count one higher than the
// last, so a lost or doubled delta fails).
type typing struct {
	pages  []*benchkit.Page
	total  atomic.Int64
	rounds atomic.Int64
	mu     sync.Mutex // guards err and where
	err    error
	where  map[string]string // user → the worker that answered last
	done   chan struct{}
	wg     sync.WaitGroup
}

func startTyping(t *testing.T, fronts []string) *typing {
	t.Helper()
	ty := &typing{where: map[string]string{}, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range users {
		user := fmt.Sprintf("person-%02d", i)
		p, err := benchkit.OpenPage(ctx, fronts[i%len(fronts)], user, 30*time.Second)
		if err != nil {
			t.Fatalf("opening %s's page on %s: %v", user, fronts[i%len(fronts)], err)
		}
		ty.pages = append(ty.pages, p)
	}
	ty.wg.Add(1)
	go func() {
		defer ty.wg.Done()
		for {
			select {
			case <-ty.done:
				return
			default:
			}
			var wg sync.WaitGroup
			for i, p := range ty.pages {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w, err := p.Inc()
					ty.mu.Lock()
					defer ty.mu.Unlock()
					if err != nil && ty.err == nil {
						ty.err = fmt.Errorf("person-%02d: %w", i, err)
					}
					if err == nil {
						ty.where[fmt.Sprintf("person-%02d", i)] = w
						ty.total.Add(1)
					}
				}()
			}
			wg.Wait()
			ty.rounds.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { ty.halt() })
	return ty
}

func (ty *typing) halt() {
	select {
	case <-ty.done:
	default:
		close(ty.done)
	}
	ty.wg.Wait()
	for _, p := range ty.pages {
		p.Abort()
	}
}

func (ty *typing) failure() error {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return ty.err
}

// waitRounds waits for n more rounds of everyone typing, failing on the
// first failed message.
func (ty *typing) waitRounds(t *testing.T, n int64) {
	t.Helper()
	target := ty.rounds.Load() + n
	deadline := time.Now().Add(2 * time.Minute)
	for ty.rounds.Load() < target {
		if err := ty.failure(); err != nil {
			t.Fatalf("a message failed: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("typing stalled at round %d", ty.rounds.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := ty.failure(); err != nil {
		t.Fatalf("a message failed: %v", err)
	}
}

func (ty *typing) stop(t *testing.T) {
	t.Helper()
	ty.halt()
	if err := ty.failure(); err != nil {
		t.Fatalf("a message failed: %v", err)
	}
}

func (ty *typing) answered() map[string]string {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return maps(ty.where)
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// kvUser is one person in the registry Consul KV holds.
type kvUser struct {
	Group  string `json:"group"`
	Worker string `json:"worker"`
	Host   string `json:"host"`
	Epoch  uint64 `json:"epoch"`
}

// checkPlacement compares what `consul kv get -recurse stickyd/placement`
// says with where people really are: the worker that answered each one's
// last message, the maps' record, and the group they must be in.
func checkPlacement(t *testing.T, consulAddr, admin string, ty *typing, group string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		problem := placementProblem(t, consulAddr, admin, ty, group)
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the placement registry in Consul KV is not where people are: %s", problem)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func placementProblem(t *testing.T, consulAddr, admin string, ty *typing, group string) string {
	consulBin := testagents.Require(t, "consul")
	cmd := exec.Command(consulBin, "kv", "get", "-recurse", "stickyd/placement/users/")
	cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR="+consulAddr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("consul kv get: %v: %s", err, out)
	}
	kv := map[string]kvUser{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			return "unreadable line " + line
		}
		var u kvUser
		if err := json.Unmarshal([]byte(val), &u); err != nil {
			return fmt.Sprintf("%s: %v", line, err)
		}
		kv[strings.TrimPrefix(key, "stickyd/placement/users/")] = u
	}
	var page struct {
		Users []struct {
			User   string `json:"user"`
			Worker string `json:"worker"`
			Epoch  uint64 `json:"epoch"`
		} `json:"users"`
		Next string `json:"next"`
	}
	if err := getJSON(admin+"/v1/users?limit=1000", &page); err != nil {
		return err.Error()
	}
	if page.Next != "" {
		return "more than a page (1000) of people in the maps"
	}
	maps := page.Users
	if len(kv) != len(maps) {
		return fmt.Sprintf("%d people in KV, %d in the maps", len(kv), len(maps))
	}
	answered := ty.answered()
	for _, u := range maps {
		k, ok := kv[u.User]
		switch {
		case !ok:
			return u.User + " is not in KV"
		case k.Worker != u.Worker || k.Epoch != u.Epoch:
			return fmt.Sprintf("%s: KV says %s epoch %d, the maps %s epoch %d", u.User, k.Worker, k.Epoch, u.Worker, u.Epoch)
		case k.Group != group:
			return fmt.Sprintf("%s: KV says group %q, want %q", u.User, k.Group, group)
		case !strings.HasPrefix(k.Worker, k.Host+"."):
			return fmt.Sprintf("%s: KV says worker %s on host %s", u.User, k.Worker, k.Host)
		case !strings.HasPrefix(k.Host, "stickyd-group-"+group+"-"):
			return fmt.Sprintf("%s: host %s is not an allocation of stickyd-group-%s", u.User, k.Host, group)
		case answered[u.User] != "" && answered[u.User] != k.Worker:
			return fmt.Sprintf("%s: answered by %s, KV says %s", u.User, answered[u.User], k.Worker)
		}
	}
	return ""
}

func getJSON(url string, out any) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Stickyd-Token", adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// waitService waits until Consul's catalog lists n instances of service.
func waitService(t *testing.T, cc *consulapi.Client, service string, n int, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		entries, _, err := cc.Health().Service(service, "", true, nil)
		if err == nil && len(entries) >= n {
			var addrs []string
			for _, e := range entries {
				host := e.Service.Address
				if host == "" {
					host = e.Node.Address
				}
				addrs = append(addrs, fmt.Sprintf("%s:%d", host, e.Service.Port))
			}
			slices.Sort(addrs)
			return addrs
		}
		if time.Now().After(deadline) {
			t.Fatalf("Consul lists %d passing instances of %s, want %d (err %v)", len(entries), service, n, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitLeader waits until the servers have a leader and n members.
func waitLeader(t *testing.T, admin string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var st struct {
			Leader  string            `json:"leader"`
			Members []json.RawMessage `json:"members"`
		}
		err := getJSON(admin+"/v1/status", &st)
		if err == nil && st.Leader != "" && len(st.Members) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader with %d members: %+v, %v", n, st, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitWorkers waits until group has n workers registered in the maps.
func waitWorkers(t *testing.T, admin, group string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var v struct {
			Groups []struct {
				Name      string   `json:"name"`
				WorkerIDs []string `json:"worker_ids"`
			} `json:"groups"`
		}
		err := getJSON(admin+"/v1/groups", &v)
		for _, g := range v.Groups {
			if g.Name == group && len(g.WorkerIDs) >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s has not %d workers: %+v, %v", group, n, v, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitJob waits until `nomad job status JOB` says it is running.
func waitJob(t *testing.T, env []string, job string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cmd := exec.Command(testagents.Require(t, "nomad"), "job", "status", job)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "= running") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nomad job status %s: %v\n%s", job, err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitNoJob waits until Nomad no longer has job (stopped and purged).
func waitNoJob(t *testing.T, n *testagents.Nomad, job string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, _, err := n.Client().Jobs().Info(job, nil)
		if err != nil && strings.Contains(err.Error(), "404") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is still registered (%v)", job, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// run runs a command, failing the test unless it exits with code.
func run(t *testing.T, env []string, code int, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	got := 0
	if ee, ok := err.(*exec.ExitError); ok {
		got = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %s: %v", filepath.Base(name), strings.Join(args, " "), err)
	}
	if got != code {
		t.Fatalf("%s %s: exit %d, want %d\n%s", filepath.Base(name), strings.Join(args, " "), got, code, out)
	}
	return string(out)
}

// dumpLogsOnFailure logs the end of the stderr of every allocation of job's
// task when the test fails (before the agents stop): what the agents said.
func dumpLogsOnFailure(t *testing.T, n *testagents.Nomad, job, task string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		allocs, _, err := n.Client().Jobs().Allocations(job, true, nil)
		if err != nil {
			t.Logf("allocations of %s: %v", job, err)
			return
		}
		for _, a := range allocs {
			cmd := exec.Command(testagents.Require(t, "nomad"), "alloc", "logs", "-stderr", "-tail", "-n", "30", a.ID, task)
			cmd.Env = append(os.Environ(), n.Env()...)
			out, _ := cmd.CombinedOutput()
			t.Logf("allocation %s of %s (%s), stderr:\n%s", a.ID[:8], job, a.ClientStatus, out)
		}
	})
}

// fetchMetrics reads an agent's /metrics.
func fetchMetrics(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// checkNoOrphans waits (bounded) until no process runs a binary from under
// dir, Nomad's data directory: the servers' stickyd, the hosts' stickyd and
// their workers all run from allocation directories there.
func checkNoOrphans(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var left []string
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
			if err != nil || !strings.HasPrefix(exe, dir+string(filepath.Separator)) {
				continue
			}
			b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			left = append(left, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan processes after tear-down:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
