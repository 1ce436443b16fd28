package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/testagents"
)

// A leader killed in the middle of a move leaves the person "moving" in
// the maps; the next leader rolls the move back as its term begins, and
// the person types on at home. The servers run with a nomad block (a real
// Nomad agent) and a consul block, as deployed: their leader-only loops
// (Nomad jobs, the Consul mirror, the maintenance copy) run beside the
// roll-back, and every new term must still roll back and find the cookie
// key ring seeded. Twenty leaders are killed, one move each.
func TestLeaderKilledDuringAMoveRollsBack(t *testing.T) {
	testagents.Require(t, "consul")
	testagents.Require(t, "nomad")
	consul := testagents.StartConsul(t)
	nomad := testagents.StartNomad(t, testagents.NomadOptions{ConsulAddr: consul.HTTPAddr})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	blocks := fmt.Sprintf(`
consul {
  address = %q
}
nomad {
  address         = %q
  driver          = "raw_exec"
  stickyd_command = %q
  archive         = "http://127.0.0.1:9/bundles"
}
move {
  freeze_timeout = "20s"
}
`, consul.HTTPAddr, nomad.Addr, exe)
	ps, _ := startClusterSpec(t, 3, func(int) procSpec { return procSpec{workers: 1, extra: []string{blocks}} })

	leaderNow := func() int {
		t.Helper()
		var at int
		waitFor(t, 30*time.Second, "a leader", func() bool {
			for i, p := range ps {
				if s, ok := status(t, p); ok && s.Leader == "s"+strconv.Itoa(i+1) {
					at = i
					return true
				}
			}
			return false
		})
		return at
	}
	userState := func(p *proc, user string) (state, worker string) {
		code, body := adminCallAtQuiet(p.admin, "GET", "/v1/users/"+user, testToken)
		if code != 200 {
			return "", ""
		}
		var u struct{ State, Worker string }
		_ = json.Unmarshal([]byte(body), &u)
		return u.State, u.Worker
	}
	const rounds = 20
	for round := range rounds {
		leader := leaderNow()
		lead := ps[leader]
		// A person at home on a follower's worker, moved to the other
		// follower's.
		var (
			user string
			br   *browser
			home string
		)
		for try := 0; ; try++ {
			user = fmt.Sprintf("m%d-%d", round, try)
			br = procBrowser(t, ps[(leader+1)%3])
			if code, body := br.do("POST", "/login?user="+user); code != 200 {
				t.Fatalf("round %d: login: %d %s", round, code, body)
			}
			home = br.whoami().Worker
			if !strings.HasPrefix(home, "s"+strconv.Itoa(leader+1)+".") {
				break
			}
			if try == 10 {
				t.Fatalf("round %d: every newcomer lands on the leader's worker", round)
			}
		}
		to := ""
		for i := range ps {
			if w := "s" + strconv.Itoa(i+1) + ".web-1"; i != leader && w != home {
				to = w
			}
		}
		tb := br.openTab("p")
		tb.send(map[string]any{"op": "inc"})
		tb.drainUntil("count", 1)
		// The stall holds the person's mailbox: the freeze waits behind it,
		// and the move stands with its barrier up.
		stalled := make(chan error, 1)
		go func() {
			_, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "stall", "ms": 2000}})
			stalled <- err
		}()
		time.Sleep(100 * time.Millisecond)
		moved := make(chan struct{})
		go func() {
			defer close(moved)
			postIgnoringAnswer(lead.admin, "/v1/users/"+user+"/move", `{"to":"`+to+`"}`)
		}()
		survivor := ps[(leader+1)%3]
		waitFor(t, 10*time.Second, "the move's barrier", func() bool { s, _ := userState(survivor, user); return s == "moving" })
		if err := lead.stop(syscall.SIGKILL); err == nil {
			t.Fatalf("round %d: SIGKILL reported a clean exit", round)
		}
		killed := time.Now()
		<-moved
		waitFor(t, 30*time.Second, "the next leader to roll the move back", func() bool {
			s, w := userState(survivor, user)
			return s == "live" && w == home
		})
		t.Logf("round %d: leader s%d killed mid-move; rolled back %v later", round, leader+1, time.Since(killed).Round(time.Millisecond))
		if err := <-stalled; err != nil {
			t.Fatalf("round %d: the stalled message: %v", round, err)
		}
		// The ring is in the maps, as the new leader's term found or
		// seeded it.
		if code, body := adminCallAtQuiet(survivor.admin, "GET", "/v1/operator/keyring", testToken); code != 200 || !strings.Contains(body, `"signs":true`) {
			t.Fatalf("round %d: the cookie key ring: %d %s", round, code, body)
		}
		// The person types on, at home.
		tb.send(map[string]any{"op": "inc"})
		tb.drainUntil("count", 2)
		if got := br.whoami().Worker; got != home {
			t.Fatalf("round %d: %s is on %s after the roll-back, want %s", round, user, got, home)
		}
		_ = tb.ws.Close()
		// The killed server comes back before the next round (a quorum of
		// three needs it).
		lead.launch()
		lead.waitHealthy()
		waitFor(t, 60*time.Second, "three healthy voters", func() bool {
			for _, p := range ps {
				v, ok := peersOf(t, p)
				if !ok || len(v) != 3 {
					return false
				}
				if code, _ := clusterHealth(p); code != 200 {
					return false
				}
			}
			return true
		})
	}
}

// postIgnoringAnswer posts body to an admin API and ignores the answer
// (the server may die before it answers).
func postIgnoringAnswer(addr, path, body string) {
	req, _ := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("X-Stickyd-Token", testToken)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
	}
}
