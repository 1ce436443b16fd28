package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/move"
)

// An operator forgets a person (POST /v1/users/USER/forget, `stickyd user
// forget`): they leave the maps with their connections, their worker lets
// them go, and their parked package is deleted; their browser's next
// request starts afresh, as a newcomer's. Another person is untouched.
// Forgetting someone unknown is a 404.
func TestForgetUser(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgentWith(t, mode, 2, withDataDir(t))
			fay, fayTab, home := countingPerson(t, a, "fay")
			_, gusTab, _ := countingPerson(t, a, "gus")
			fayTab.send(map[string]any{"op": "inc"})

			// Parked on another worker, her package waiting for her next frame.
			res, err := a.Supervisor().Move(t.Context(), "fay", otherWorker(a.Pool().Ready(), home), "test")
			if err != nil || res.Package == "" || !a.Park().Has(res.Package) {
				t.Fatalf("move: %+v %v", res, err)
			}
			code, body := adminCall(t, a, "POST", "/v1/users/fay/forget", a.Token(), "")
			if code != 200 {
				t.Fatalf("forget: %d %s", code, body)
			}
			var f move.Forgotten
			if err := json.Unmarshal([]byte(body), &f); err != nil || f.User != "fay" || f.Conns != 1 || f.Package != res.Package {
				t.Fatalf("forget answered %s (%v), want fay with 1 connection and package %s", body, err, res.Package)
			}
			if _, ok := a.Supervisor().User("fay"); ok {
				t.Fatal("fay is still in the maps")
			}
			for _, u := range a.Supervisor().Users() {
				if u.User == "fay" {
					t.Fatalf("user list still has fay: %+v", u)
				}
			}
			if a.Park().Has(res.Package) {
				t.Fatal("fay's parked package is still in the park")
			}
			// Her browser starts afresh: no longer fay.
			deadline := time.Now().Add(10 * time.Second)
			for {
				w := fay.whoami()
				if w.User == "" || strings.HasPrefix(w.User, "~") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("fay's browser is still served as %q", w.User)
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Gus goes on counting.
			ans := gusTab.send(map[string]any{"op": "inc"})
			if !strings.Contains(string(ans.Data), `"count":2`) {
				t.Fatalf("gus after fay was forgotten: %s", ans.Data)
			}
			// Gus, live on his worker, is forgotten too: no worker holds
			// anyone then (fay's browser came back as a newcomer who never
			// opened a page: nobody to hold).
			held := func() (n uint64) {
				for _, w := range a.Pool().Ready() {
					r, err := a.Pool().Probe(t.Context(), w)
					if err != nil {
						t.Fatal(err)
					}
					n += uint64(r.Pages)
				}
				return n
			}
			if n := held(); n != 1 {
				t.Fatalf("the workers hold %d pages with gus on his, want 1", n)
			}
			if _, err := a.Supervisor().ForgetUser(t.Context(), "gus"); err != nil {
				t.Fatal(err)
			}
			if _, ok := a.Supervisor().User("gus"); ok {
				t.Fatal("gus is still in the maps")
			}
			if n := held(); n != 0 {
				t.Fatalf("the workers still hold %d pages after everyone was forgotten", n)
			}
			if code, body := adminCall(t, a, "POST", "/v1/users/nobody/forget", a.Token(), ""); code != 404 || !strings.Contains(body, "no such user") {
				t.Fatalf("forgetting an unknown user: %d %s", code, body)
			}
		})
	}
}

// A site's logout (Session.Forget) forgets the person once its answer is
// sent: the answer arrives, then the person leaves the maps and their
// worker, and their browser is a newcomer again.
func TestLogoutForgets(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgentWith(t, mode, 1)
			b, _, _ := countingPerson(t, a, "hal")
			if code, body := b.do("POST", "/logout"); code != 200 || !strings.Contains(body, "logged out") {
				t.Fatalf("logout: %d %s", code, body)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, inMaps := a.Supervisor().User("hal")
				r, err := a.Pool().Probe(t.Context(), a.Pool().Ready()[0])
				if err != nil {
					t.Fatal(err)
				}
				if !inMaps && r.Pages == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the logout: hal in the maps %v, %d pages in the worker", inMaps, r.Pages)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if w := b.whoami(); w.User == "hal" {
				t.Fatalf("the browser is still served as hal: %+v", w)
			}
			// Hal logs in again, on the same worker: a new person of the
			// same name, served from a clean page (the worker kept no
			// fence of the one forgotten).
			if code, body := b.do("POST", "/login?user=hal"); code != 200 {
				t.Fatalf("logging in again: %d %s", code, body)
			}
			tb := b.openTab("p")
			ans := tb.send(map[string]any{"op": "inc"})
			if !strings.Contains(string(ans.Data), `"count":1`) {
				t.Fatalf("hal's first message after logging in again: %s, want count 1", ans.Data)
			}
		})
	}
}
