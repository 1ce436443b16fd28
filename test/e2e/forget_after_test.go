package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/placement"
)

func withLifecycle(idle, forget string) option {
	return func(c *agent.Config) {
		c.Lifecycle = &agent.LifecycleConfig{IdlePark: idle, ForgetAfter: forget}
	}
}

// lifecycle.forget_after: a person who left (tab closed, no request since)
// is idle-parked (idle_park 1s), then forgotten (forget_after 6s): gone from the maps, their package gone
// from the park, nothing of them in the worker. A person whose tab stays
// open without a word is not forgotten (an open WebSocket is seen), nor is
// one who types; the silent one's next message finds her page whole.
func TestForgottenAfterTheyLeave(t *testing.T) {
	waits(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgentWith(t, mode, 1, withDataDir(t), withLifecycle("1s", "6s"))
			_, ivyTab, home := countingPerson(t, a, "ivy")
			_, salTab, _ := countingPerson(t, a, "sal")
			_, tedTab, _ := countingPerson(t, a, "ted")
			ivyTab.ws.Close() // ivy leaves for good

			var ivyPkg string
			typed := 1
			deadline := time.Now().Add(30 * time.Second)
			for {
				tedTab.send(map[string]any{"op": "inc"})
				typed++
				u, ok := a.Supervisor().User("ivy")
				if !ok {
					break
				}
				if u.Package != "" {
					ivyPkg = u.Package
				}
				if time.Now().After(deadline) {
					t.Fatalf("ivy was never forgotten: %+v", u)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if ivyPkg == "" {
				t.Fatal("ivy was forgotten without being parked first; the test wants her package to see it deleted")
			}
			// Her package is deleted once the maps let her go: just after
			// the entry that removes her commits.
			waitFor(t, 10*time.Second, "ivy's package "+ivyPkg+" to leave the park", func() bool {
				return !a.Park().Has(ivyPkg)
			})
			// Past forget_after again: sal (silent, tab open) and ted
			// (typing) stay.
			until := time.Now().Add(8 * time.Second)
			for time.Now().Before(until) {
				tedTab.send(map[string]any{"op": "inc"})
				typed++
				for _, who := range []string{"sal", "ted"} {
					u, ok := a.Supervisor().User(who)
					if !ok {
						t.Fatalf("%s was forgotten though connected", who)
					}
					if u.Seen == 0 || time.Since(time.Unix(u.Seen, 0)) > 4*time.Second {
						t.Fatalf("%s last seen %d (%v ago)", who, u.Seen, time.Since(time.Unix(u.Seen, 0)))
					}
				}
				time.Sleep(200 * time.Millisecond)
			}
			if s, _ := a.Supervisor().User("sal"); s.State != placement.StateParked && s.State != placement.StateLive {
				t.Fatalf("sal: %+v", s)
			}
			ans := sendRetrying(t, salTab, map[string]any{"op": "inc"})
			if !strings.Contains(string(ans.Data), `"count":2`) {
				t.Fatalf("sal's message after her silence: %s, want count 2", ans.Data)
			}
			ans = tedTab.send(map[string]any{"op": "inc"})
			if !strings.Contains(string(ans.Data), `"count":`) {
				t.Fatalf("ted: %s", ans.Data)
			}
			// The worker holds sal's page and ted's, not ivy's.
			waitFor(t, 10*time.Second, "the worker to hold two pages", func() bool {
				r, err := a.Pool().Probe(t.Context(), home)
				return err == nil && r.Pages == 2
			})
		})
	}
}

// A person parked by a stop, who never comes back after the restart, is
// forgotten by the restarted agent once forget_after has passed: gone from
// the maps and from the park folder. One who comes back is not.
func TestParkedAcrossARestartThenForgotten(t *testing.T) {
	waits(t)
	p := newProcSpec(t, procSpec{workers: 1, name: "solo", expect: 1,
		extra: []string{"lifecycle {\n  idle_park = \"off\"\n  forget_after = \"5s\"\n}\n"}})
	p.start()
	people := map[string]*tab{}
	for _, who := range []string{"gone", "back"} {
		b := procBrowser(t, p)
		if code, body := b.do("POST", "/login?user="+who); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		tb := b.openTab("p")
		tb.send(map[string]any{"op": "inc"})
		tb.drainUntil("count", 1)
		people[who] = tb
	}
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("agent exit: %v\n%s", err, p.out)
	}
	for _, tb := range people {
		tb.ws.Close()
	}
	p.start()
	if h := p.health(); h.Restart.Parked != 2 {
		t.Fatalf("restart report %+v", h.Restart)
	}
	parkDir := filepath.Join(p.dir, "data")
	users := p.users
	gonePkg := users()["gone"].Package
	if gonePkg == "" {
		t.Fatalf("gone is not parked after the restart: %+v", users()["gone"])
	}
	// "back" returns and keeps typing; "gone" never does.
	back := people["back"]
	back.connect()
	ans := sendRetrying(t, back, map[string]any{"op": "inc"})
	if !strings.Contains(string(ans.Data), `"count":2`) {
		t.Fatalf("back after the restart: %s", ans.Data)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		back.send(map[string]any{"op": "inc"})
		m := users()
		if _, ok := m["back"]; !ok {
			t.Fatal("back was forgotten while typing")
		}
		if _, ok := m["gone"]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gone was never forgotten: %+v\n%s", m["gone"], p.out)
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Nothing of gone's package is left in the data dir.
	hex := strings.TrimPrefix(gonePkg, "sha256:")
	_ = filepath.Walk(parkDir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && strings.Contains(info.Name(), hex) {
			t.Errorf("gone's package is still on disk: %s", path)
		}
		return nil
	})
}

// An idle person parked by idle_park on one server's worker, then moved
// while parked to a worker of another server (a drain would do the same),
// wakes there at their next frame, sent through the first server's front,
// with their page whole.
func TestIdleParkedWakeOnAnotherHost(t *testing.T) {
	ps := startThreeServers(t, "lifecycle {\n  idle_park = \"1s\"\n}\n")
	waitFor(t, 30*time.Second, "a leader", func() bool {
		s, ok := status(t, ps[0])
		return ok && s.Leader != "" && len(s.Members) == 3
	})
	b := procBrowser(t, ps[0])
	if code, body := b.do("POST", "/login?user=ivo"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	tb := b.openTab("p")
	for range 3 {
		tb.send(map[string]any{"op": "inc"})
	}
	home := b.whoami().Worker
	var parked placement.UserInfo
	waitFor(t, 30*time.Second, "ivo, idle, to be parked on "+home, func() bool {
		parked = ps[0].users()["ivo"]
		return parked.State == placement.StateParked && parked.Worker == home
	})
	// Parked, moved to a worker of another server.
	var to string
	for _, w := range []string{"s1.web-1", "s2.web-1", "s3.web-1"} {
		if w != home && !strings.HasPrefix(home, strings.SplitN(w, ".", 2)[0]+".") {
			to = w
			break
		}
	}
	code, body := adminDoAs(t, ps[0].admin, "POST", "/v1/users/ivo/move", testToken, `{"to":"`+to+`"}`)
	if code != 200 {
		t.Fatalf("moving parked ivo to %s: %d %s", to, code, body)
	}
	ans := sendRetrying(t, tb, map[string]any{"op": "inc"})
	if !strings.Contains(string(ans.Data), `"count":4`) || ans.Worker != to {
		t.Fatalf("ivo's first message after the move: %s from %s, want count 4 from %s", ans.Data, ans.Worker, to)
	}
	if u := ps[0].users()["ivo"]; u.Worker != to {
		t.Fatalf("ivo after the wake: %+v, want on %s", u, to)
	}
}

// A connection nobody sees for forget_after is forgotten while its person
// is seen on another (a browser gone for good): it leaves the maps and its
// worker, with its page; the person's other connection carries on, whole;
// the old cookie, back, is a newcomer.
func TestStaleConnectionForgotten(t *testing.T) {
	waits(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgentWith(t, mode, 1, withDataDir(t), withLifecycle("off", "6s"))
			_, typing, home := countingPerson(t, a, "uma")
			old := newBrowser(t, a)
			old.do("POST", "/login?user=uma")
			oldConn := old.whoami().Conn
			oldTab := old.openTab("q")
			oldTab.send(map[string]any{"op": "inc"})
			oldTab.ws.Close() // that browser is never used again
			if u, _ := a.Supervisor().User("uma"); u.Conns != 2 {
				t.Fatalf("uma has %d connections, want 2", u.Conns)
			}
			count := 1
			deadline := time.Now().Add(40 * time.Second)
			for {
				typing.send(map[string]any{"op": "inc"})
				count++
				if _, ok := a.Supervisor().Lookup(oldConn); !ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the connection nobody saw was never forgotten")
				}
				time.Sleep(200 * time.Millisecond)
			}
			u, ok := a.Supervisor().User("uma")
			if !ok || u.Conns != 1 {
				t.Fatalf("uma after her old connection went: %+v (%v)", u, ok)
			}
			// Her worker let the connection go, with its page.
			waitFor(t, 10*time.Second, "the worker to hold one connection and one page", func() bool {
				r, err := a.Pool().Probe(t.Context(), home)
				return err == nil && r.Conns == 1 && r.Pages == 1
			})
			ans := typing.send(map[string]any{"op": "inc"})
			if want := fmt.Sprintf(`"count":%d`, count+1); !strings.Contains(string(ans.Data), want) {
				t.Fatalf("uma's page after: %s, want %s", ans.Data, want)
			}
			if w := old.whoami(); w.User == "uma" || w.Conn == oldConn {
				t.Fatalf("the forgotten cookie came back as %+v", w)
			}
		})
	}
}
