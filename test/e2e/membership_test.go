package e2e

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/stickyd/stickyd/internal/testagents"
)

// peersOf lists the raft configuration as server p sees it: id → address.
func peersOf(t *testing.T, p *proc) (map[string]string, bool) {
	code, body := adminCallAtQuiet(p.admin, "GET", "/v1/status", testToken)
	if code != 200 {
		return nil, false
	}
	var s struct {
		Leader  string
		Members []struct {
			ID      string
			Address string
			Voter   bool
		}
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if s.Leader == "" {
		return nil, false
	}
	out := map[string]string{}
	for _, m := range s.Members {
		if m.Voter {
			out[m.ID] = m.Address
		}
	}
	return out, true
}

func adminStatus(t *testing.T, p *proc) (struct{ Workers []struct{ ID string } }, bool) {
	var s struct{ Workers []struct{ ID string } }
	code, body := adminCallAtQuiet(p.admin, "GET", "/v1/status", testToken)
	if code != 200 {
		return s, false
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	return s, true
}

// health reads GET /v1/agent/health of a server (no token).
func clusterHealth(p *proc) (int, string) {
	return adminCallAtQuiet(p.admin, "GET", "/v1/agent/health", "")
}

var raftAddrRE = regexp.MustCompile(`(?m)^(\s*(raft_addr|rpc_addr)\s*=\s*)"[^"]*"`)

// readdress gives a stopped server new raft and peer-link ports, as Nomad
// does to a replaced allocation.
func readdress(t *testing.T, p *proc) {
	t.Helper()
	path := filepath.Join(p.dir, "stickyd.hcl")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = raftAddrRE.ReplaceAllFunc(b, func(m []byte) []byte {
		sub := raftAddrRE.FindSubmatch(m)
		return []byte(string(sub[1]) + strconv.Quote(freePort(t)))
	})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitVoters waits until every live server sees the same three voters, one
// of them id at an address other than old, and each answers its health
// check.
func waitVoters(t *testing.T, ps []*proc, id, old string, within time.Duration) {
	t.Helper()
	var last map[string]string
	waitFor(t, within, "three voters again, "+id+" at its new address", func() bool {
		for _, p := range ps {
			peers, ok := peersOf(t, p)
			if !ok || len(peers) != 3 || peers[id] == "" || peers[id] == old {
				last = peers
				return false
			}
			if code, _ := clusterHealth(p); code != 200 {
				return false
			}
		}
		return true
	})
	_ = last
}

// A server replaced on new ports (a Nomad allocation stopped and placed
// again, its data migrated) is a voter again at its new address within
// seconds, follower and leader alike; a server replaced without its data
// joins the existing cluster (it does not bootstrap a second one) and
// catches up. People keep their pages throughout.
func TestServerRejoinsOnNewAddress(t *testing.T) {
	waits(t)
	// The fronts share their cookie key, as in a deployment (a wiped data
	// dir would otherwise take a server's own key with it).
	key := filepath.Join(t.TempDir(), "cookie.key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	ps, leader := startClusterSpec(t, 3, func(int) procSpec {
		return procSpec{workers: 1, front: "  cookie_key_file = " + strconv.Quote(key) + "\n"}
	})
	type person struct {
		home  int // the server whose front holds the WebSocket
		tb    *tab
		count int
	}
	var people []*person
	for i, p := range ps {
		b := procBrowser(t, p)
		if code, body := b.do("POST", "/login?user=m"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		tb := b.openTab("p")
		tb.send(map[string]any{"op": "inc"})
		tb.drainUntil("count", 1)
		people = append(people, &person{home: i, tb: tb, count: 1})
	}
	typeAll := func() {
		t.Helper()
		for _, pp := range people {
			pp.tb.send(map[string]any{"op": "inc"})
			pp.count++
			pp.tb.drainUntil("count", pp.count)
		}
	}

	replace := func(i int, wipe bool) {
		t.Helper()
		p := ps[i]
		id := "s" + strconv.Itoa(i+1)
		peers, _ := peersOf(t, ps[(i+1)%3])
		old := peers[id]
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("%s stopping: %v\n%s", id, err, p.out)
		}
		if wipe {
			if err := os.RemoveAll(filepath.Join(p.dir, "data")); err != nil {
				t.Fatal(err)
			}
		}
		readdress(t, p)
		start := time.Now()
		p.launch()
		p.waitHealthy()
		waitVoters(t, ps, id, old, 60*time.Second)
		t.Logf("%s (wiped %v) is a voter again at a new address after %v", id, wipe, time.Since(start).Round(time.Millisecond))
		for _, pp := range people {
			if pp.home == i {
				pp.tb.connect() // the front restarted: the tab reconnects, same page
			}
		}
		typeAll()
	}
	leaderNow := func() int {
		t.Helper()
		for i, p := range ps {
			if s, ok := status(t, p); ok && s.Leader == "s"+strconv.Itoa(i+1) {
				return i
			}
		}
		t.Fatal("no leader")
		return -1
	}
	follower := (leader + 1) % 3
	replace(follower, false)
	replace(leaderNow(), false)
	// One that lost its data: it joins the cluster and gets its maps. Its
	// worker is drained first (by the leader, which keeps the packages),
	// as an operator would before throwing a disk away.
	leader = leaderNow()
	wiped := (leader + 1) % 3
	st, _ := adminStatus(t, ps[wiped])
	for _, w := range st.Workers {
		if code, body := adminCallAtQuiet(ps[leader].admin, "POST", "/v1/workers/"+w.ID+"/drain", testToken); code != 200 {
			t.Fatalf("draining %s: %d %s", w.ID, code, body)
		}
	}
	replace(wiped, true)
	waitFor(t, 20*time.Second, "the wiped server's replica has everyone", func() bool {
		code, body := adminCallAtQuiet(ps[wiped].admin, "GET", "/v1/users?limit=1000", testToken)
		var page struct{ Users []struct{ User string } }
		_ = json.Unmarshal([]byte(body), &page)
		return code == 200 && len(page.Users) >= len(people)
	})
	typeAll()
}

// blockable is a TCP proxy in front of a server's raft port that a test
// can cut: while blocked it closes every connection it holds and takes.
type blockable struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	blocked bool
	conns   []net.Conn
}

func newBlockable(t *testing.T, target string) *blockable {
	ln, err := net.Listen("tcp", freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	b := &blockable{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); b.block(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			if b.blocked {
				b.mu.Unlock()
				c.Close()
				continue
			}
			b.mu.Unlock()
			go b.pipe(c)
		}
	}()
	return b
}

func (b *blockable) pipe(c net.Conn) {
	up, err := net.Dial("tcp", b.target)
	if err != nil {
		c.Close()
		return
	}
	b.mu.Lock()
	b.conns = append(b.conns, c, up)
	b.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

func (b *blockable) block(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.blocked = on
	if on {
		for _, c := range b.conns {
			c.Close()
		}
		b.conns = nil
	}
}

// The health check Consul runs on a server (GET /v1/agent/health) fails
// while the server is cut off from raft — its raft port blocked — and
// passes again once it is reachable; the others stay healthy. A real
// Consul agent runs the servers' checks as jobs/stickyd.nomad declares
// them, and `consul://stickyd-server` then never hands out the cut-off
// server.
func TestHealthFailsOutsideRaft(t *testing.T) {
	consul := testagents.StartConsul(t)
	var proxy *blockable
	ps, _ := startClusterSpec(t, 3, func(i int) procSpec {
		sp := procSpec{workers: 1}
		if i == 2 { // the third server's raft traffic comes through the proxy
			sp.raftVia = func(bind string) string {
				proxy = newBlockable(t, bind)
				return proxy.ln.Addr().String()
			}
		}
		return sp
	})
	for _, p := range ps {
		if code, body := clusterHealth(p); code != 200 {
			t.Fatalf("%s unhealthy in a healthy cluster: %d %s", p.admin, code, body)
		}
	}
	cc := consul.Client()
	for i, p := range ps {
		host, port, _ := net.SplitHostPort(p.admin)
		n, _ := strconv.Atoi(port)
		reg := &consulapi.AgentServiceRegistration{ID: "s" + strconv.Itoa(i+1), Name: "stickyd-server", Address: host, Port: n,
			Check: &consulapi.AgentServiceCheck{Name: "raft member", HTTP: "http://" + p.admin + "/v1/agent/health", Interval: "1s", Timeout: "1s"}}
		if err := cc.Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}
	passing := func() map[string]bool {
		entries, _, err := cc.Health().Service("stickyd-server", "", true, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, e := range entries {
			out[e.Service.ID] = true
		}
		return out
	}
	waitFor(t, 30*time.Second, "Consul to pass the three servers' checks", func() bool { return len(passing()) == 3 })
	cut := ps[2]
	if s, _ := status(t, cut); s.Leader == "s3" {
		// The proxy cuts the way in; make sure s3 is a follower, which
		// hears from the leader only through it.
		code, body := adminCallAtQuiet(cut.admin, "POST", "/v1/operator/raft/transfer-leader", testToken)
		t.Logf("s3 led; transferring: %d %s", code, body)
		waitFor(t, 20*time.Second, "another leader", func() bool { s, ok := status(t, cut); return ok && s.Leader != "s3" })
	}
	proxy.block(true)
	var body string
	waitFor(t, 30*time.Second, "s3's health check to fail", func() bool {
		var code int
		code, body = clusterHealth(cut)
		return code == 503
	})
	t.Logf("s3 cut off: %s", body)
	for _, p := range ps[:2] {
		waitFor(t, 30*time.Second, "the others to stay healthy", func() bool { code, _ := clusterHealth(p); return code == 200 })
	}
	waitFor(t, 30*time.Second, "Consul to fail s3's check only", func() bool { p := passing(); return len(p) == 2 && !p["s3"] })
	// What the CLI and the hosts resolve: never the cut-off server.
	for range 10 {
		out, code := runCLIEnv(t, []string{"CONSUL_HTTP_ADDR=" + consul.HTTPAddr}, "consul://stickyd-server", "status", "-json")
		if code != 0 || strings.Contains(out, `"name": "s3"`) || strings.Contains(out, `"name":"s3"`) {
			t.Fatalf("stickyd status through consul://stickyd-server with s3 cut off: exit %d\n%s", code, out)
		}
	}
	proxy.block(false)
	waitFor(t, 60*time.Second, "s3's health check to pass again", func() bool { code, _ := clusterHealth(cut); return code == 200 })
	waitFor(t, 30*time.Second, "Consul to pass s3 again", func() bool { return len(passing()) == 3 })
}

// The leader removes a member it has not reached for
// dead_server_cleanup once the voters it still reaches number at least
// bootstrap_expect (a fourth server that joined and died), and keeps an
// unreachable one while removing it would leave fewer (one of the three).
func TestDeadServerCleanup(t *testing.T) {
	waits(t)
	cleanup := "  dead_server_cleanup = \"3s\"\n"
	ps, _ := startClusterSpec(t, 3, func(int) procSpec { return procSpec{workers: 1, server: cleanup} })
	var admins []string
	for _, p := range ps {
		admins = append(admins, p.admin)
	}
	extra := newProcSpec(t, procSpec{workers: 1, name: "s4", expect: 3, join: admins, server: cleanup})
	extra.start()
	voters := func() map[string]string {
		for _, p := range ps {
			if peers, ok := peersOf(t, p); ok {
				return peers
			}
		}
		return nil
	}
	waitFor(t, 30*time.Second, "s4 to join as the fourth voter", func() bool { v := voters(); return len(v) == 4 && v["s4"] != "" })
	if err := extra.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-extra.exited
	killed := time.Now()
	waitFor(t, 30*time.Second, "the dead s4 to be removed", func() bool { v := voters(); return len(v) == 3 && v["s4"] == "" })
	t.Logf("s4 removed %v after it was killed", time.Since(killed).Round(time.Millisecond))

	// One of the three now: removing it would leave two voters of three
	// expected, so it stays until it comes back.
	var follower *proc
	for i, p := range ps {
		if s, ok := status(t, p); ok && s.Leader != "s"+strconv.Itoa(i+1) {
			follower = p
			break
		}
	}
	if err := follower.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-follower.exited
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if v := voters(); len(v) != 3 {
			t.Fatalf("a dead voter of the three was removed: voters %v", v)
		}
		time.Sleep(200 * time.Millisecond)
	}
	follower.launch()
	follower.waitHealthy()
	waitFor(t, 30*time.Second, "the follower healthy again", func() bool { code, _ := clusterHealth(follower); return code == 200 })
}

// runCLI runs the stickyd CLI (this test binary re-executed) against admin.
func runCLI(t *testing.T, admin string, args ...string) (string, int) {
	t.Helper()
	return runCLIEnv(t, nil, "http://"+admin, args...)
}

// runCLIEnv runs the CLI against address with env added.
func runCLIEnv(t *testing.T, env []string, address string, args ...string) (string, int) {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe, append(args, "-address", address, "-token", testToken)...)
	cmd.Env = append(append(os.Environ(), agentEnv+"=1"), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// The operator's raft tools through any server: transfer-leader hands
// leadership to another voter; remove-peer takes out a server that is gone
// and refuses an unknown id and the leader itself.
func TestOperatorRaftTools(t *testing.T) {
	ps, leader := startClusterSpec(t, 3, func(int) procSpec { return procSpec{workers: 1, server: "  dead_server_cleanup = \"0s\"\n"} })
	via := ps[(leader+1)%3] // a follower: the calls are forwarded
	if out, code := runCLI(t, via.admin, "operator", "raft", "transfer-leader"); code != 0 {
		t.Fatalf("transfer-leader: exit %d\n%s", code, out)
	}
	old := "s" + strconv.Itoa(leader+1)
	waitFor(t, 20*time.Second, "another leader", func() bool { s, ok := status(t, via); return ok && s.Leader != "" && s.Leader != old })
	s, _ := status(t, via)
	if out, code := runCLI(t, via.admin, "operator", "raft", "remove-peer", s.Leader); code == 0 || !strings.Contains(out, "transfer leadership first") {
		t.Fatalf("remove-peer of the leader: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, via.admin, "operator", "raft", "remove-peer", "s9"); code == 0 || !strings.Contains(out, `no raft peer "s9"`) {
		t.Fatalf("remove-peer of an unknown id: exit %d\n%s", code, out)
	}
	// A follower gone for good, removed by the operator.
	var gone *proc
	var goneID string
	for i, p := range ps {
		if id := "s" + strconv.Itoa(i+1); id != s.Leader && p != via {
			gone, goneID = p, id
		}
	}
	if err := gone.stop(syscall.SIGKILL); err == nil {
		t.Fatal("SIGKILL reported a clean exit")
	}
	if out, code := runCLI(t, via.admin, "operator", "raft", "remove-peer", goneID); code != 0 {
		t.Fatalf("remove-peer %s: exit %d\n%s", goneID, code, out)
	}
	waitFor(t, 10*time.Second, goneID+" out of the configuration", func() bool {
		v, ok := peersOf(t, via)
		return ok && len(v) == 2 && v[goneID] == ""
	})
}

// A replacement server that takes the raft address another server had (a
// Nomad allocation placed again on a small port range) joins and is a
// voter within 30 s, and once it leads, the followers, which knew the old
// server at that address, forward their writes to its admin API, not the
// old one's: they read who is at an address from the raft configuration
// they have now.
func TestReplacementOnAnotherServersRaftAddress(t *testing.T) {
	ps, leader := startClusterSpec(t, 3, func(int) procSpec { return procSpec{workers: 1} })
	gone := (leader + 1) % 3
	goneID := "s" + strconv.Itoa(gone+1)
	peers, _ := peersOf(t, ps[leader])
	reused := peers[goneID]
	if reused == "" {
		t.Fatalf("%s is not a voter: %v", goneID, peers)
	}
	if err := ps[gone].stop(syscall.SIGKILL); err == nil {
		t.Fatal("SIGKILL reported a clean exit")
	}
	var live []*proc
	var admins []string
	for i, p := range ps {
		if i != gone {
			live = append(live, p)
			admins = append(admins, p.admin)
		}
	}
	s4 := newProcSpec(t, procSpec{workers: 1, name: "s4", expect: 3, join: admins})
	path := filepath.Join(s4.dir, "stickyd.hcl")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`(?m)^(\s*raft_addr\s*=\s*)"[^"]*"`).ReplaceAll(b, []byte(`${1}`+strconv.Quote(reused)))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s4.launch()
	s4.waitHealthy()
	all := append(live, s4)
	waitFor(t, 30*time.Second, "s4 a voter at "+goneID+"'s raft address", func() bool {
		for _, p := range all {
			v, ok := peersOf(t, p)
			if !ok || len(v) != 3 || v["s4"] != reused || v[goneID] != "" {
				return false
			}
		}
		return true
	})
	t.Logf("s4 is a voter at %s's old raft address %s after %v", goneID, reused, time.Since(start).Round(time.Millisecond))

	// s4 leads: transfer leadership until it does.
	for try := 0; ; try++ {
		s, _ := status(t, s4)
		if s.Leader == "s4" {
			break
		}
		if try == 10 {
			t.Fatal("s4 never took the lead")
		}
		if out, code := runCLI(t, live[0].admin, "operator", "raft", "transfer-leader", "-id", "s4"); code != 0 {
			t.Logf("transfer-leader -id s4: exit %d\n%s", code, out)
			time.Sleep(time.Second)
			continue
		}
		waitFor(t, 20*time.Second, "another leader than "+s.Leader, func() bool {
			n, ok := status(t, s4)
			return ok && n.Leader != "" && n.Leader != s.Leader
		})
	}
	// Each follower forwards a newcomer's login and its messages to s4.
	for i, p := range live {
		br := procBrowser(t, p)
		if code, body := br.do("POST", "/login?user=r"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("login through a follower while s4 leads: %d %s", code, body)
		}
		tb := br.openTab("p")
		tb.send(map[string]any{"op": "inc"})
		tb.drainUntil("count", 1)
	}
}
