package e2e

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/freeport"
)

// proc is a real `stickyd agent` process (this test binary, re-executed).
type proc struct {
	t      *testing.T
	netns  string // the network namespace it runs in, if any
	nofile int    // the open-file limit it runs under (prlimit), if set
	dir    string
	front  string
	admin  string
	cmd    *exec.Cmd
	out    *bytes.Buffer
	exited chan error
}

// freePort is a loopback address for an agent process to listen on, from
// ports no other test binary and no outgoing connection is handed.
func freePort(t *testing.T) string { return freeport.Addr(t) }

// newProc writes an agent configuration in a fresh directory.
func newProc(t *testing.T, workers int) *proc {
	return newProcWith(t, workers, "solo", 1, nil, "")
}

// newProcWith writes the configuration of one server of a cluster of expect
// servers; admin and front are chosen here unless given.
func newProcWith(t *testing.T, workers int, name string, expect int, join []string, admin string, extra ...string) *proc {
	return newProcSpec(t, procSpec{workers: workers, name: name, expect: expect, join: join, admin: admin, extra: extra})
}

// procSpec is one server's configuration: front and group take more lines
// for those blocks, extra more blocks. ip is the address it listens on
// (default 127.0.0.1), netns the network namespace it runs in.
type procSpec struct {
	workers      int
	name         string
	expect       int
	join         []string
	admin        string
	front, group string
	extra        []string
	ip, netns    string
	// raftVia, when set, is given the raft bind address and returns the
	// address the others are to dial instead (raft_advertise).
	raftVia func(bind string) string
	// server is added inside the server block, adminExtra inside the
	// admin block.
	server, adminExtra string
	// nofile, when set, is the open-file limit (soft and hard) the agent
	// runs under.
	nofile int
	// app is the application the group's workers serve (this binary as
	// its worker); default counter.
	app string
}

// onIP moves a loopback address picked by freePort to ip.
func onIP(addr, ip string) string {
	if ip == "" {
		return addr
	}
	return ip + strings.TrimPrefix(addr, "127.0.0.1")
}

func newProcSpec(t *testing.T, sp procSpec) *proc {
	workers, name, expect, join, admin, extra := sp.workers, sp.name, sp.expect, sp.join, sp.admin, sp.extra
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, dir: t.TempDir(), front: onIP(freePort(t), sp.ip), admin: admin, netns: sp.netns, nofile: sp.nofile}
	if p.admin == "" {
		p.admin = onIP(freePort(t), sp.ip)
	}
	raftBind, raftExtra := onIP(freePort(t), sp.ip), sp.server
	if sp.raftVia != nil {
		raftExtra += fmt.Sprintf("  raft_advertise = %q\n", sp.raftVia(raftBind))
	}
	joins := ""
	for _, j := range join {
		joins += fmt.Sprintf("%q, ", j)
	}
	cfg := fmt.Sprintf(`
name     = %q
data_dir = %q
log_level = "info"
server {
  bootstrap_expect = %d
  raft_addr        = %q
  rpc_addr         = %q
  retry_join       = [%s]
%s}
front {
  address       = %q
  frame_timeout = "10s"
  barrier_wait  = "20s"
%s}
admin {
  address = %q
  token   = %q
%s}
group "web" {
  workers = %d
  plugin {
    command = %q
    env     = { %s = %q }
  }
%s}
`, name, filepath.Join(p.dir, "data"), expect, raftBind, onIP(freePort(t), sp.ip), joins, raftExtra, p.front, sp.front, p.admin, testToken, sp.adminExtra, workers, exe, workerEnv, cmp.Or(sp.app, "counter"), sp.group)
	cfg += strings.Join(extra, "\n")
	if err := os.WriteFile(filepath.Join(p.dir, "stickyd.hcl"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *proc) start() {
	p.t.Helper()
	p.launch()
	p.waitHealthy()
}

// launch starts the process without waiting for it.
func (p *proc) launch() {
	p.t.Helper()
	exe, _ := os.Executable()
	p.out = &bytes.Buffer{}
	p.cmd = exec.Command(exe, "agent", "-config", filepath.Join(p.dir, "stickyd.hcl"))
	if p.netns != "" {
		// ip execs the agent in the namespace: the pid is the agent's.
		p.cmd = exec.Command("ip", append([]string{"netns", "exec", p.netns, exe}, p.cmd.Args[1:]...)...)
	}
	if p.nofile > 0 {
		// prlimit execs the agent under the limit: the pid is the agent's.
		lim := fmt.Sprintf("--nofile=%d:%d", p.nofile, p.nofile)
		p.cmd = exec.Command("prlimit", append([]string{lim, exe}, p.cmd.Args[1:]...)...)
	}
	p.cmd.Env = append(os.Environ(), agentEnv+"=1")
	var out io.Writer = p.out
	if dir := os.Getenv("STICKYD_E2E_LOGS"); dir != "" {
		// Every agent's output is kept there too, across its restarts.
		name := filepath.Join(dir, strings.ReplaceAll(p.t.Name(), "/", "_")+"."+filepath.Base(p.dir)+".log")
		if f, err := os.OpenFile(name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			p.t.Cleanup(func() { f.Close() })
			out = io.MultiWriter(p.out, f)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan error, 1)
	done := make(chan struct{})
	cmd := p.cmd
	go func() {
		p.exited <- cmd.Wait()
		close(done)
	}()
	p.t.Cleanup(func() {
		// done, not cmd.ProcessState: Wait writes that field on its own
		// goroutine.
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
}

// waitHealthy waits until the front answers its health check.
func (p *proc) waitHealthy() {
	p.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.exited:
			p.t.Fatalf("agent exited at start: %v\n%s", err, p.out)
		default:
		}
		if resp, err := http.Get("http://" + p.front + "/_stickyd/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				// Whoever sees the front healthy finds the admin API
				// whole (every start of every test checks it).
				if code, body := adminCallAtQuiet(p.admin, "GET", "/v1/status", testToken); code == http.StatusServiceUnavailable &&
					strings.Contains(body, "the agent is starting") {
					p.t.Fatalf("the front is healthy but the admin API is not: %d %s", code, body)
				}
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("agent never became healthy:\n%s", p.out)
}

// stop sends sig and waits for the process to exit.
func (p *proc) stop(sig syscall.Signal) error {
	p.t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(60 * time.Second):
		p.t.Fatalf("agent did not stop on %v:\n%s", sig, p.out)
		return nil
	}
}

type restartHealth struct {
	Restart struct {
		Folder       string   `json:"folder"`
		Parked       int      `json:"parked"`
		Missing      int      `json:"missing"`
		Offline      int      `json:"offline"`
		Incomplete   []string `json:"incomplete"`
		AbortedMoves []string `json:"aborted_moves"`
	} `json:"restart"`
}

func (p *proc) health() restartHealth {
	p.t.Helper()
	resp, err := healthDetails(p.front)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var h restartHealth
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		p.t.Fatal(err)
	}
	return h
}

// procBrowser is a browser pointed at a process's front.
func procBrowser(t *testing.T, p *proc) *browser {
	b := newBrowserAt(t, "http://"+p.front)
	return b
}

// A full restart loses no session: 20 times SIGTERM and start again, with
// people typing between restarts and a reader hammering the front through
// them. Every person keeps their login (no fresh login) and their page, with
// every note, resumed without a resync.
func TestRestartLosesNoSession(t *testing.T) {
	const users, cycles, perCycle = 12, 20, 4
	p := newProc(t, 2)
	p.start()
	tabs := make([]*tab, users)
	for i := range tabs {
		b := procBrowser(t, p)
		if code, body := b.do("POST", "/login?user=r"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		tabs[i] = b.openTab("typing")
		tabs[i].pull(0)
	}
	// Load through the restarts: a reader polling the front (errors while
	// the agent is down are expected; it only keeps the front busy).
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		c := &http.Client{Timeout: time.Second}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if resp, err := c.Get("http://" + p.front + "/_stickyd/health"); err == nil {
				resp.Body.Close()
			}
		}
	}()
	notes, freshLogins := 0, 0
	for cycle := 0; cycle < cycles; cycle++ {
		for _, tb := range tabs {
			for k := 0; k < perCycle; k++ {
				tb.send(map[string]any{"op": "note", "text": strconv.Itoa(notes + k)})
			}
		}
		notes += perCycle
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("cycle %d: agent exit: %v\n%s", cycle, err, p.out)
		}
		for _, tb := range tabs {
			tb.ws.Close()
		}
		p.start()
		if h := p.health(); h.Restart.Parked != users || h.Restart.Missing != 0 || len(h.Restart.Incomplete) != 0 {
			t.Fatalf("cycle %d: restart report %+v\n%s", cycle, h.Restart, p.out)
		}
		for i, tb := range tabs {
			if w := tb.b.whoami(); w.User != "r"+strconv.Itoa(i) {
				freshLogins++
				t.Errorf("cycle %d: user %d is %+v after the restart", cycle, i, w)
			}
			ans := tb.connect()
			if ans.Opened.Resync || ans.Opened.Notice != "" {
				t.Fatalf("cycle %d: page of user %d did not resume: %+v", cycle, i, ans.Opened)
			}
			tb.drainUntil("notes", notes)
		}
	}
	for i, tb := range tabs {
		for n := 0; n < notes; n++ {
			if got := tb.tree["note/"+strconv.Itoa(n)]; got != strconv.Itoa(n) {
				t.Fatalf("user %d: note %d = %v after %d restarts", i, n, got, cycles)
			}
		}
		for k := 1; k < len(tb.seqs); k++ {
			if tb.seqs[k] != tb.seqs[k-1]+1 {
				t.Fatalf("user %d: delta gap or duplicate across restarts", i)
			}
		}
	}
	if freshLogins != 0 {
		t.Fatalf("%d fresh logins", freshLogins)
	}
	t.Logf("%d users, %d restarts, %d notes each, 0 fresh logins", users, cycles, notes)
}

// SIGKILL while parking: the incomplete folder is ignored and reported, the
// maps are consistent (nobody left moving), people parked before the kill
// wake with their state, and the others' pages restart clean with a notice.
func TestKilledWhileParking(t *testing.T) {
	const users = 40
	p := newProc(t, 2)
	p.start()
	tabs := make([]*tab, users)
	for i := range tabs {
		b := procBrowser(t, p)
		b.do("POST", "/login?user=k"+strconv.Itoa(i))
		tabs[i] = b.openTab("p")
		tabs[i].send(map[string]any{"op": "fill", "bytes": 2 << 20}) // parking takes a while
		tabs[i].send(map[string]any{"op": "inc"})
		tabs[i].drainUntil("count", 1)
	}
	restart := filepath.Join(p.dir, "data", "restart")
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, 30*time.Second, "a park folder to appear", func() bool {
		entries, _ := os.ReadDir(restart)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".tmp") {
				return true
			}
		}
		return false
	})
	// Kill once some people are parked and others are not.
	waitFor(t, 30*time.Second, "some people to be parked", func() bool {
		req, _ := http.NewRequest("GET", "http://"+p.admin+"/v1/users?state=parked", nil)
		req.Header.Set("X-Stickyd-Token", testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var page struct{ Users []struct{ State string } }
		_ = json.NewDecoder(resp.Body).Decode(&page)
		n := 0
		for _, u := range page.Users {
			if u.State == "parked" {
				n++
			}
		}
		return n >= 4
	})
	_ = p.cmd.Process.Kill()
	<-p.exited
	for _, tb := range tabs {
		tb.ws.Close()
	}
	p.start()
	h := p.health()
	if len(h.Restart.Incomplete) != 1 || h.Restart.Folder != "" {
		t.Fatalf("restart report %+v", h.Restart)
	}
	code, body := adminCallAt(t, p.admin, "GET", "/v1/users?limit=1000", testToken)
	if code != 200 {
		t.Fatalf("users: %d %s", code, body)
	}
	var page struct {
		Users []struct{ User, State string }
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatal(err)
	}
	parked := map[string]bool{}
	for _, u := range page.Users {
		if u.State == "moving" {
			t.Fatalf("%s is stuck moving after the restart", u.User)
		}
		if u.State == "parked" {
			parked[u.User] = true
		}
	}
	kept, reset := 0, 0
	for i, tb := range tabs {
		user := "k" + strconv.Itoa(i)
		if w := tb.b.whoami(); w.User != user {
			t.Fatalf("%s lost their login: %+v", user, w)
		}
		ans := tb.connect()
		if parked[user] {
			if ans.Opened.Resync || ans.Opened.Notice != "" {
				t.Fatalf("%s was parked but the page did not resume: %+v", user, ans.Opened)
			}
			tb.send(map[string]any{"op": "inc"})
			tb.drainUntil("count", 2)
			kept++
		} else {
			if ans.Opened.Notice == "" {
				t.Fatalf("%s lost their page without a notice: %+v", user, ans.Opened)
			}
			reset++
		}
	}
	t.Logf("killed while parking: %d people kept their page, %d restarted clean with a notice; aborted moves %v",
		kept, reset, h.Restart.AbortedMoves)
	if kept == 0 {
		t.Fatal("nobody was parked before the kill: the test did not hit the middle of parking")
	}
}

func adminCallAt(t *testing.T, addr, method, path, token string) (int, string) {
	t.Helper()
	return adminDoAs(t, addr, method, path, token, "")
}

// healthDetails is the front's health check with its details (the
// restart report, disk_full), which only the admin token opens.
func healthDetails(front string) (*http.Response, error) {
	req, _ := http.NewRequest("GET", "http://"+front+"/_stickyd/health", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	return http.DefaultClient.Do(req)
}
