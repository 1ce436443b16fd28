package deploy

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/stickyd/stickyd/internal/testagents"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// TestNomadOperations is what an operator does every week to a running
// deployment, done with the real nomad CLI while 24 people type through
// the fronts Consul lists, every count checked: a node drain of a group
// host's client (its people move to the group's other host), the leader's
// and a follower's allocation stopped, a rolling update of the servers'
// job with a changed variable, one that replaces every server without its
// data, and the tear-down, which leaves no job, no process and no key.
//
// The nodes: the dev agent (servers, default pool) and two client agents
// in the pool "hosts", which the group jobs use.
func TestNomadOperations(t *testing.T) {
	testagents.Require(t, "consul")
	nomadBin := testagents.Require(t, "nomad")
	root := t.TempDir()

	stickyd := benchkit.BuildStickyd(t)
	archiveDir, digests := benchkit.PackBundles(t, stickyd, "counter", "counter/cmd/counter-worker", nil, nil)
	dist := serveDist(t, stickyd, archiveDir)

	consul := testagents.StartConsul(t)
	nomad := testagents.StartNomad(t, testagents.NomadOptions{ConsulAddr: consul.HTTPAddr})
	var hostNodes []*testagents.NomadClient
	for range 2 {
		// Each node has its own Consul agent, as in production: a Nomad
		// client keeps the services of its allocations in its own.
		local := testagents.StartConsulClient(t, consul)
		hostNodes = append(hostNodes, testagents.StartNomadClient(t, nomad, testagents.ClientOptions{ConsulAddr: local.HTTPAddr, NodePool: "hosts"}))
	}
	cc := consul.Client()
	nc := nomad.Client()

	vars := filepath.Join(root, "site.vars.hcl")
	// Mutual TLS between the agents through every operation, the
	// certificates from stickyd tls in the job's Nomad variable.
	writeFile(t, vars, siteVars(dist, consul.HTTPAddr, nomad.Addr, "group_node_pool = \"hosts\"\ntls = true\n"))
	jobfile, _ := filepath.Abs("../../jobs/stickyd.nomad")
	putSecrets(t, nomad, tlsItems(t, stickyd, filepath.Join(root, "tls"))...)
	run(t, nomad.Env(), 0, nomadBin, "job", "run", "-detach", "-var-file", vars, jobfile)
	waitService(t, cc, "stickyd-server", 3, 3*time.Minute)
	admin := func() string { return "http://" + waitService(t, cc, "stickyd-server", 1, time.Minute)[0] }
	waitLeader(t, admin(), 3, time.Minute)
	env := []string{"STICKYD_ADDR=consul://stickyd-server", "CONSUL_HTTP_ADDR=" + consul.HTTPAddr, "STICKYD_TOKEN=" + adminToken}
	cli := func(args ...string) string { return run(t, env, 0, stickyd, args...) }

	// The rendered configuration is the server's only; it is 0600 anyway.
	for _, a := range runningAllocs(t, nc, "stickyd") {
		fi, _, err := nc.AllocFS().Stat(a, "server/local/stickyd.hcl", nil)
		if err != nil {
			t.Fatal(err)
		}
		if fi.FileMode != "-rw-------" {
			t.Fatalf("server/local/stickyd.hcl of %s is %s, want -rw-------", a.Name, fi.FileMode)
		}
	}

	cli("group", "create", "-bundle", digests[0], "-workers", "2", "v1")
	waitJob(t, nomad.Env(), "stickyd-group-v1", time.Minute)
	waitWorkers(t, admin(), "v1", 4, 3*time.Minute) // 2 hosts × 2 workers
	checkNoSecrets(t, nomad, "stickyd")
	checkNoSecrets(t, nomad, "stickyd-group-v1")
	hosts := runningAllocs(t, nc, "stickyd-group-v1")
	if len(hosts) != 2 || hosts[0].NodeID == hosts[1].NodeID {
		t.Fatalf("the group's 2 hosts are not on 2 nodes: %v", allocNodes(hosts))
	}
	cli("group", "promote", "v1")

	ty := startTypists(t, cc, users)
	ty.waitEach(t, 5, 2*time.Minute)
	report := func(what string) {
		done, retries, reconnects, ambiguous := ty.stats()
		t.Logf("%s: %d incs answered so far, %d retried refusals, %d reconnects, %d answers lost with their connection (the inc had run)",
			what, done, retries, reconnects, ambiguous)
	}
	report("typing")

	// 1. A node drain of the client running one host: its people move to
	// the other host before Nomad stops it; nobody waits past the retries.
	drained, other := hosts[0], hosts[1]
	start := time.Now()
	run(t, nomad.Env(), 0, nomadBin, "node", "drain", "-enable", "-yes", "-deadline", "3m", drained.NodeID)
	t.Logf("nomad node drain of %s (running %s) took %v", drained.NodeID[:8], drained.Name, time.Since(start).Round(time.Millisecond))
	otherHost := hostName(other)
	waitFor(t, time.Minute, "everyone on "+otherHost, func() string {
		for _, u := range mapsUsers(t, admin()) {
			if !strings.HasPrefix(u.Worker, otherHost+".") {
				return fmt.Sprintf("%s is on %s", u.User, u.Worker)
			}
		}
		return ""
	})
	ty.waitEach(t, 5, 2*time.Minute)
	for user, w := range ty.where() {
		if !strings.HasPrefix(w, otherHost+".") {
			t.Fatalf("%s was last answered by %s, not by the other host %s", user, w, otherHost)
		}
	}
	report("after the drain")
	run(t, nomad.Env(), 0, nomadBin, "node", "drain", "-disable", "-yes", drained.NodeID)

	// 2. The leader's allocation stopped, then a follower's: three voters
	// again within 60 s each time.
	for _, which := range []string{"leader", "follower"} {
		name := serverNamed(t, admin(), which == "leader")
		a := serverAlloc(t, nc, name)
		start := time.Now()
		run(t, nomad.Env(), 0, nomadBin, "alloc", "stop", "-detach", a.ID)
		waitVoters(t, nc, cc, a.ID, 60*time.Second)
		t.Logf("%s %s: alloc stopped, three voters again after %v", which, name, time.Since(start).Round(time.Millisecond))
		ty.waitEach(t, 5, 2*time.Minute)
		report("after stopping the " + which)
	}

	// 3. A rolling update of the job with a changed variable, then one
	// that gives every server a new disk (no raft data): each new
	// allocation joins the existing cluster.
	for _, change := range []string{"log_level=info", "sticky_disk=false"} {
		start := time.Now()
		run(t, nomad.Env(), 0, nomadBin, "job", "run", "-detach", "-var-file", vars, "-var", change, jobfile)
		waitDeployment(t, nc, "stickyd", 8*time.Minute)
		waitVoters(t, nc, cc, "", 60*time.Second)
		t.Logf("rolling update (%s): done, three voters, after %v", change, time.Since(start).Round(time.Millisecond))
		ty.waitEach(t, 5, 2*time.Minute)
		report("after the rolling update " + change)
	}
	if n := len(mapsUsers(t, admin())); n < users {
		t.Fatalf("%d people in the maps after the servers were replaced, want %d", n, users)
	}

	// 4. The tear-down: nothing left.
	ty.halt()
	if err := ty.failure(); err != nil {
		t.Fatalf("a person's typing failed: %v", err)
	}
	report("before the tear-down")
	out := run(t, append(env, "NOMAD_ADDR="+nomad.Addr), 0, stickyd, "operator", "teardown", "-yes")
	t.Logf("operator teardown:\n%s", out)
	jobs, _, err := nc.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if strings.HasPrefix(j.ID, "stickyd") {
			t.Fatalf("job %s is left after the tear-down (%s)", j.ID, j.Status)
		}
	}
	keys, _, err := cc.KV().Keys("stickyd/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("%d keys left under stickyd/ after the tear-down: %v", len(keys), keys)
	}
	vs, _, err := nc.Variables().PrefixList("nomad/jobs/stickyd-group-", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 0 {
		t.Fatalf("%d group job variables left after the tear-down", len(vs))
	}
	checkNoOrphans(t, nomad.Dir)
	for _, n := range hostNodes {
		checkNoOrphans(t, n.Dir)
	}
}

// runningAllocs lists job's running allocations, by name.
func runningAllocs(t *testing.T, nc *nomadapi.Client, job string) []*nomadapi.Allocation {
	t.Helper()
	stubs, _, err := nc.Jobs().Allocations(job, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []*nomadapi.Allocation
	for _, s := range stubs {
		if s.ClientStatus != "running" || s.DesiredStatus != "run" {
			continue
		}
		a, _, err := nc.Allocations().Info(s.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func allocNodes(as []*nomadapi.Allocation) map[string]string {
	m := map[string]string{}
	for _, a := range as {
		m[a.Name] = a.NodeID
	}
	return m
}

// hostName is the stickyd name of a group host allocation: its job and
// slot ("stickyd-group-v1.host[1]" → "stickyd-group-v1-1").
func hostName(a *nomadapi.Allocation) string {
	i := strings.LastIndex(a.Name, "[")
	return a.JobID + "-" + strings.TrimSuffix(a.Name[i+1:], "]")
}

type mapsUser struct {
	User   string `json:"user"`
	Worker string `json:"worker"`
	State  string `json:"state"`
}

func mapsUsers(t *testing.T, admin string) []mapsUser {
	t.Helper()
	var page struct {
		Users []mapsUser `json:"users"`
		Next  string     `json:"next"`
	}
	if err := getJSON(admin+"/v1/users?limit=1000", &page); err != nil {
		t.Fatal(err)
	}
	if page.Next != "" {
		t.Fatal("more than a page (1000) of people in the maps")
	}
	return page.Users
}

// serverNamed is the leader's name, or a follower's.
func serverNamed(t *testing.T, admin string, leader bool) string {
	t.Helper()
	var st struct {
		Leader  string `json:"leader"`
		Members []struct {
			ID string `json:"id"`
		} `json:"members"`
	}
	if err := getJSON(admin+"/v1/status", &st); err != nil {
		t.Fatal(err)
	}
	if leader {
		return st.Leader
	}
	for _, m := range st.Members {
		if m.ID != st.Leader {
			return m.ID
		}
	}
	t.Fatalf("no follower in %+v", st)
	return ""
}

// serverAlloc is the running allocation of server name
// ("stickyd-server-2" → "stickyd.server[2]").
func serverAlloc(t *testing.T, nc *nomadapi.Client, name string) *nomadapi.Allocation {
	t.Helper()
	want := "stickyd.server[" + strings.TrimPrefix(name, "stickyd-server-") + "]"
	for _, a := range runningAllocs(t, nc, "stickyd") {
		if a.Name == want {
			return a
		}
	}
	t.Fatalf("no running allocation %s", want)
	return nil
}

// waitVoters waits until three server allocations run (none of them gone,
// if gone is set), Consul passes all three stickyd-server checks, and each
// server sees the same three voters at the addresses Nomad gave them.
func waitVoters(t *testing.T, nc *nomadapi.Client, cc *consulapi.Client, gone string, within time.Duration) {
	t.Helper()
	defer func() {
		if t.Failed() {
			logServers(t, nc)
		}
	}()
	waitFor(t, within, "three voters", func() string {
		allocs := runningAllocs(t, nc, "stickyd")
		if len(allocs) != 3 {
			return fmt.Sprintf("%d server allocations run", len(allocs))
		}
		want := map[string]string{}
		for _, a := range allocs {
			if a.ID == gone {
				return "the stopped allocation still runs"
			}
			for _, p := range a.AllocatedResources.Shared.Ports {
				if p.Label == "raft" {
					want["stickyd-server-"+strings.TrimSuffix(a.Name[strings.LastIndex(a.Name, "[")+1:], "]")] = fmt.Sprintf("%s:%d", p.HostIP, p.Value)
				}
			}
		}
		entries, _, err := cc.Health().Service("stickyd-server", "", true, nil)
		if err != nil || len(entries) != 3 {
			return fmt.Sprintf("%d passing stickyd-server checks (%v)", len(entries), err)
		}
		for _, e := range entries {
			var st struct {
				Leader  string `json:"leader"`
				Members []struct {
					ID      string `json:"id"`
					Address string `json:"address"`
					Voter   bool   `json:"voter"`
				} `json:"members"`
			}
			addr := fmt.Sprintf("http://%s:%d", e.Service.Address, e.Service.Port)
			if err := getJSON(addr+"/v1/status", &st); err != nil {
				return err.Error()
			}
			voters := map[string]string{}
			for _, m := range st.Members {
				if m.Voter {
					voters[m.ID] = m.Address
				}
			}
			if st.Leader == "" || fmt.Sprint(voters) != fmt.Sprint(want) {
				return fmt.Sprintf("%s sees leader %q, voters %v; Nomad runs %v", addr, st.Leader, voters, want)
			}
		}
		return ""
	})
}

// waitDeployment waits until job's latest deployment is successful.
func waitDeployment(t *testing.T, nc *nomadapi.Client, job string, within time.Duration) {
	t.Helper()
	waitFor(t, within, "the deployment of "+job, func() string {
		d, _, err := nc.Jobs().LatestDeployment(job, nil)
		switch {
		case err != nil:
			return err.Error()
		case d == nil:
			return "no deployment yet"
		case d.Status == "failed" || d.Status == "cancelled":
			t.Fatalf("deployment %s of %s: %s (%s)", d.ID[:8], job, d.Status, d.StatusDescription)
		case d.Status != "successful":
			return d.Status + ": " + d.StatusDescription
		}
		return ""
	})
}

// waitFor polls cond (which says what is still wrong, "" when done) until
// it is done, failing the test at the deadline.
func waitFor(t *testing.T, within time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		problem := cond()
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %s for %s: %s", within, what, problem)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// logServers logs the tail of every running server allocation's stderr,
// to say why the cluster did not come back.
func logServers(t *testing.T, nc *nomadapi.Client) {
	for _, a := range runningAllocs(t, nc, "stickyd") {
		r, err := nc.AllocFS().Cat(a, "alloc/logs/server.stderr.0", nil)
		if err != nil {
			t.Logf("%s: reading its log: %v", a.Name, err)
			continue
		}
		b, _ := io.ReadAll(r)
		r.Close()
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("%s (%s), last lines of its log:\n%s", a.Name, a.ID[:8], strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}
