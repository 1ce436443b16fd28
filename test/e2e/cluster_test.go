package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type clusterStatus struct {
	Name    string
	Leader  string
	Members []struct {
		ID     string
		Leader bool
	}
}

func status(t *testing.T, p *proc) (clusterStatus, bool) {
	code, body := adminCallAtQuiet(p.admin, "GET", "/v1/status", testToken)
	if code != 200 {
		return clusterStatus{}, false
	}
	var s clusterStatus
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	return s, true
}

// startThreeServers starts three real agents (s1, s2, s3, one worker
// each) that form a raft cluster over TCP, each joining the others, extra
// added to each one's configuration; it returns once all three answer
// their health check.
func startThreeServers(t *testing.T, extra ...string) []*proc {
	t.Helper()
	admins := []string{freePort(t), freePort(t), freePort(t)}
	var ps []*proc
	for i := range admins {
		var join []string
		for j, a := range admins {
			if j != i {
				join = append(join, a)
			}
		}
		ps = append(ps, newProcWith(t, 1, "s"+strconv.Itoa(i+1), 3, join, admins[i], extra...))
	}
	for _, p := range ps {
		p.launch()
	}
	for _, p := range ps {
		p.waitHealthy()
	}
	return ps
}

// Three real agents form a raft cluster over TCP; people use all three
// fronts; the leader is SIGKILLed: a new leader is elected within seconds,
// no acknowledged write is lost, the people on the surviving servers keep
// working, and a new session (a write, forwarded to the leader) waits out the
// election and succeeds.
func TestClusterSurvivesLeaderLoss(t *testing.T) {
	ps := startThreeServers(t)
	var leader string
	waitFor(t, 30*time.Second, "a leader", func() bool {
		s, ok := status(t, ps[0])
		leader = s.Leader
		return ok && s.Leader != "" && len(s.Members) == 3
	})

	// Three people per front; every login is a write through the leader.
	type person struct {
		p    *proc
		name string
		tb   *tab
	}
	var people []person
	for i, p := range ps {
		for k := 0; k < 3; k++ {
			b := procBrowser(t, p)
			name := "c" + strconv.Itoa(i) + strconv.Itoa(k)
			if code, body := b.do("POST", "/login?user="+name); code != 200 {
				t.Fatalf("login of %s on s%d: %d %s", name, i+1, code, body)
			}
			tb := b.openTab("p")
			tb.send(map[string]any{"op": "inc"})
			people = append(people, person{p, name, tb})
		}
	}
	var dead *proc
	for i, p := range ps {
		if "s"+strconv.Itoa(i+1) == leader {
			dead = p
		}
	}
	killed := time.Now()
	if err := dead.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-dead.exited

	// A new person arrives on a survivor during the election: their
	// session is a write that waits for the new leader.
	var survivor *proc
	for _, p := range ps {
		if p != dead {
			survivor = p
			break
		}
	}
	newcomer := procBrowser(t, survivor)
	if code, body := newcomer.do("POST", "/login?user=newcomer"); code != 200 {
		t.Fatalf("login during the election: %d %s", code, body)
	}
	var newLeader string
	waitFor(t, 15*time.Second, "a new leader", func() bool {
		s, ok := status(t, survivor)
		newLeader = s.Leader
		return ok && s.Leader != "" && s.Leader != leader
	})
	t.Logf("leader %s killed; %s leads after %v", leader, newLeader, time.Since(killed).Round(time.Millisecond))

	// No acknowledged write lost: every login reaches every survivor's
	// replica (a follower's replica may trail the leader by a moment).
	for _, p := range ps {
		if p == dead {
			continue
		}
		missing := ""
		present := func() bool {
			code, body := adminCallAtQuiet(p.admin, "GET", "/v1/users?limit=1000", testToken)
			if code != 200 {
				missing = body
				return false
			}
			var page struct{ Users []struct{ User string } }
			_ = json.Unmarshal([]byte(body), &page)
			have := map[string]bool{}
			for _, u := range page.Users {
				have[u.User] = true
			}
			for _, pp := range people {
				if !have[pp.name] {
					missing = pp.name
					return false
				}
			}
			missing = "newcomer"
			return have["newcomer"]
		}
		deadline := time.Now().Add(10 * time.Second)
		for !present() {
			if time.Now().After(deadline) {
				t.Fatalf("%s, acknowledged, is missing from the maps of %s", missing, p.admin)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The people on the survivors keep working, same login, same page.
	for _, pp := range people {
		if pp.p == dead {
			continue
		}
		if w := pp.tb.b.whoami(); w.User != pp.name {
			t.Fatalf("%s is %+v after the leader died", pp.name, w)
		}
		pp.tb.send(map[string]any{"op": "inc"})
		pp.tb.drainUntil("count", 2)
	}
}

func adminCallAtQuiet(addr, method, path, token string) (int, string) {
	req, _ := http.NewRequest(method, "http://"+addr+path, nil)
	req.Header.Set("X-Stickyd-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startCluster starts n real agents that form one raft cluster, with one
// worker each, and returns them with the leader's index.
func startCluster(t *testing.T, n int) ([]*proc, int) {
	return startClusterWith(t, n, nil)
}

// startClusterWith starts n servers, adding extra(i) to server i's
// configuration when extra is set.
func startClusterWith(t *testing.T, n int, extra func(i int) string) ([]*proc, int) {
	return startClusterSpec(t, n, func(i int) procSpec {
		sp := procSpec{workers: 1}
		if extra != nil {
			sp.extra = []string{extra(i)}
		}
		return sp
	})
}

// startClusterSpec starts n servers, server i configured by spec(i) (its
// name, expect, join and admin are filled in here).
func startClusterSpec(t *testing.T, n int, spec func(i int) procSpec) ([]*proc, int) {
	specs := make([]procSpec, n)
	admins := make([]string, n)
	for i := range admins {
		specs[i] = spec(i)
		admins[i] = onIP(freePort(t), specs[i].ip)
	}
	var ps []*proc
	for i := range admins {
		var join []string
		for j, a := range admins {
			if j != i {
				join = append(join, a)
			}
		}
		sp := specs[i]
		sp.name, sp.expect, sp.join, sp.admin = "s"+strconv.Itoa(i+1), n, join, admins[i]
		ps = append(ps, newProcSpec(t, sp))
	}
	for _, p := range ps {
		p.launch()
	}
	for _, p := range ps {
		p.waitHealthy()
	}
	leader := -1
	waitFor(t, 30*time.Second, "a leader", func() bool {
		s, ok := status(t, ps[0])
		for i := range ps {
			if ok && s.Leader == "s"+strconv.Itoa(i+1) {
				leader = i
			}
		}
		return leader >= 0 && len(s.Members) == n
	})
	return ps, leader
}

// A follower's front keeps routing a person while the leader moves them
// from host to host: every note typed through the follower lands once, in
// order, whichever host holds the person.
func TestFollowerRoutesThroughMoves(t *testing.T) {
	ps, leader := startCluster(t, 3)
	follower := ps[(leader+1)%3]
	b := procBrowser(t, follower)
	if code, body := b.do("POST", "/login?user=rover"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	tb := b.openTab("notes")
	tb.pull(0)
	workers := []string{"s1.web-1", "s2.web-1", "s3.web-1"}
	seen := map[string]bool{}
	const notes = 40
	for i := 0; i < notes; i++ {
		tb.send(map[string]any{"op": "note", "text": strconv.Itoa(i)})
		if i%5 == 4 {
			home := b.whoami().Worker
			seen[home] = true
			to := workers[(indexOf(workers, home)+1)%len(workers)]
			code, body := adminPost(t, ps[leader].admin, "/v1/users/rover/move", `{"to":"`+to+`"}`)
			if code != 200 {
				t.Fatalf("move by the leader to %s: %d %s", to, code, body)
			}
			if got := b.whoami().Worker; got != to {
				t.Fatalf("the follower's front routes rover to %s, want %s", got, to)
			}
		}
	}
	tb.drainUntil("notes", notes)
	for i := 0; i < notes; i++ {
		if got := tb.tree["note/"+strconv.Itoa(i)]; got != strconv.Itoa(i) {
			t.Fatalf("note %d = %v", i, got)
		}
	}
	for k := 1; k < len(tb.seqs); k++ {
		if tb.seqs[k] != tb.seqs[k-1]+1 {
			t.Fatalf("delta gap or duplicate across hosts: %v", tb.seqs)
		}
	}
	if len(seen) < 3 {
		t.Fatalf("rover visited %d hosts, want all 3", len(seen))
	}
}

func adminPost(t *testing.T, addr, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("X-Stickyd-Token", testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The global store and its queue of waiters live in the replicated maps: a
// grant held through a follower, and a request waiting behind it through
// another follower, survive the leader's SIGKILL; when the held grant's
// lease runs out (the new leader expires it) the waiter is granted, and the
// store's values are intact.
func TestGrantQueueSurvivesLeaderLoss(t *testing.T) {
	waits(t)
	ps, leader := startCluster(t, 3)
	f1, f2 := ps[(leader+1)%3], ps[(leader+2)%3]
	person := func(p *proc, name string) *tab {
		b := procBrowser(t, p)
		if code, body := b.do("POST", "/login?user="+name); code != 200 {
			t.Fatalf("login of %s: %d %s", name, code, body)
		}
		return b.openTab("p")
	}
	a, b := person(f1, "holder"), person(f2, "waiter")
	if ans := a.send(map[string]any{"op": "sincr", "key": "kept/n", "paths": []string{"kept"}}); string(ans.Data) != "1" {
		t.Fatalf("first increment: %s", ans.Data)
	}
	a.send(map[string]any{"op": "shold", "paths": []string{"q/k"}, "lease_ms": 6000})
	held := time.Now()
	got := make(chan answer, 1)
	go func() {
		ans, err := b.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "sincr", "key": "q/k", "paths": []string{"q/k"}}})
		if err != nil {
			ans.Error = err.Error()
		}
		got <- ans
	}()
	time.Sleep(500 * time.Millisecond) // the waiter's request is queued
	if err := ps[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ps[leader].exited
	select {
	case ans := <-got:
		if ans.Op != "reply" || ans.Error != "" || string(ans.Data) != "1" {
			t.Fatalf("the waiter's increment after the leader died: %+v", ans)
		}
		if waited := time.Since(held); waited < 5*time.Second {
			t.Fatalf("the waiter was granted after %v, before the holder's 6 s lease ran out", waited)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("the waiter was never granted after the leader died")
	}
	if ans := b.send(map[string]any{"op": "sget", "paths": []string{"kept"}}); !strings.Contains(string(ans.Data), `"kept/n":1`) {
		t.Fatalf("the store after the leader change: %s", ans.Data)
	}
}

// A person who logs in through one front and comes straight back through
// another (the load balancer's choice) is the same person there, even
// before the second server's replica has the login: with the fronts
// sharing their cookie key, a signed connection the replica does not know
// yet is waited for, not replaced by a new identity.
func TestAnotherFrontKnowsANewConnection(t *testing.T) {
	c := startChaosCluster(t, 3, 1)
	for i := range 12 {
		name := "hop" + strconv.Itoa(i)
		b := procBrowser(t, c.ps[i%3])
		if code, body := b.do("POST", "/login?user="+name); code != 200 {
			t.Fatalf("login of %s: %d %s", name, code, body)
		}
		other := procBrowser(t, c.ps[(i+1)%3])
		u, _ := url.Parse(other.base)
		other.jar.SetCookies(u, []*http.Cookie{{Name: "stickyd_conn", Value: b.cookie()}})
		if w := other.whoami(); w.User != name {
			t.Fatalf("%s logged in through s%d is %+v through s%d", name, i%3+1, w, (i+1)%3+1)
		}
	}
}
