package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
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

// Three real agents form a raft cluster over TCP; people use all three
// fronts; the leader is SIGKILLed: a new leader is elected within seconds,
// no acknowledged write is lost, the people on the surviving servers keep
// working, and a new session (a write, forwarded to the leader) waits out the
// election and succeeds.
func TestClusterSurvivesLeaderLoss(t *testing.T) {
	admins := []string{freePort(t), freePort(t), freePort(t)}
	var ps []*proc
	for i := range admins {
		var join []string
		for j, a := range admins {
			if j != i {
				join = append(join, a)
			}
		}
		ps = append(ps, newProcWith(t, 1, "s"+strconv.Itoa(i+1), 3, join, admins[i]))
	}
	for _, p := range ps {
		p.launch()
	}
	for _, p := range ps {
		p.waitHealthy()
	}
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

	// No acknowledged write lost: every login is in the survivors' maps.
	for _, p := range ps {
		if p == dead {
			continue
		}
		code, body := adminCallAt(t, p.admin, "GET", "/v1/users", testToken)
		if code != 200 {
			t.Fatalf("users on a survivor: %d %s", code, body)
		}
		var us []struct{ User string }
		_ = json.Unmarshal([]byte(body), &us)
		have := map[string]bool{}
		for _, u := range us {
			have[u.User] = true
		}
		for _, pp := range people {
			if !have[pp.name] {
				t.Fatalf("%s, acknowledged before the kill, is missing from the maps", pp.name)
			}
		}
		if !have["newcomer"] {
			t.Fatal("the login made during the election is missing")
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
