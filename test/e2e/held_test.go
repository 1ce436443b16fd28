package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// adminDo calls an agent's admin API at addr with a body.
func adminDo(t *testing.T, addr, method, path, body string) (int, string) {
	t.Helper()
	return adminDoAs(t, addr, method, path, testToken, body)
}

func adminDoAs(t *testing.T, addr, method, path, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, bytes.NewBufferString(body))
	req.Header.Set("X-Stickyd-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// waitHeld waits until the agent at addr counts n requests held on db-a.
func waitHeld(t *testing.T, addr string, n int64) {
	t.Helper()
	waitFor(t, 15*time.Second, fmt.Sprintf("%d orders held on db-a", n), func() bool {
		_, body := adminDo(t, addr, "GET", "/v1/maintenance", "")
		var v struct {
			Backends []struct {
				Waiting int64 `json:"waiting"`
			} `json:"backends"`
		}
		return json.Unmarshal([]byte(body), &v) == nil && len(v.Backends) == 1 && v.Backends[0].Waiting >= n
	})
}

// orders reads the orders count of an answer.
func orders(t *testing.T, a answer) int {
	t.Helper()
	var v map[string]any
	if a.Op != "reply" || json.Unmarshal(a.Data, &v) != nil {
		t.Fatalf("an order answered %+v", a)
	}
	n, _ := v["orders"].(float64)
	return int(n)
}

// A request held by a maintenance window goes with its person: a move or
// a stop does not wait for the window to end (the held request, which has
// not run, is answered MOVED inside and sent again by the front to the
// person's new home, where it waits again), and it runs once, after the
// window.
func TestHeldOrdersTravelWithTheirPerson(t *testing.T) {
	waits(t)
	t.Run("move", func(t *testing.T) {
		a := startAgent(t, "subprocess", 2)
		const people = 3
		type held struct {
			tb    *tab
			user  string
			from  string
			reply chan answer
		}
		var hs []*held
		for i := range people {
			b := newBrowser(t, a)
			user := "h" + strconv.Itoa(i)
			if code, body := b.do("POST", "/login?user="+user); code != 200 {
				t.Fatalf("login: %d %s", code, body)
			}
			tb := b.openTab("p")
			first := tb.send(map[string]any{"op": "order"})
			if orders(t, first) != 1 {
				t.Fatalf("first order: %s", first.Data)
			}
			hs = append(hs, &held{tb: tb, user: user, from: first.Worker, reply: make(chan answer, 1)})
		}
		if code, body := adminCall(t, a, "PUT", "/v1/maintenance/db-a", testToken, `{"max_wait":"2m"}`); code != 200 {
			t.Fatalf("starting the window: %d %s", code, body)
		}
		for _, h := range hs {
			go func() {
				a, err := h.tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "order"}})
				if err != nil {
					a = answer{Op: "error", Error: err.Error()}
				}
				h.reply <- a
			}()
		}
		waitHeld(t, a.AdminAddr(), people)
		for _, h := range hs {
			to := otherWorker(a.Pool().Ready(), h.from)
			start := time.Now()
			code, body := adminCall(t, a, "POST", "/v1/users/"+h.user+"/move", testToken, `{"to":"`+to+`"}`)
			if code != 200 {
				t.Fatalf("moving %s with a held order: %d %s", h.user, code, body)
			}
			t.Logf("%s moved with a held order in %v", h.user, time.Since(start).Round(time.Millisecond))
			h.from = to
		}
		// Still held: the window is open, at the new home now.
		waitHeld(t, a.AdminAddr(), people)
		for _, h := range hs {
			select {
			case ans := <-h.reply:
				t.Fatalf("%s's held order answered while the window is open: %+v", h.user, ans)
			default:
			}
		}
		if code, body := adminCall(t, a, "DELETE", "/v1/maintenance/db-a", testToken, ""); code != 200 {
			t.Fatalf("ending the window: %d %s", code, body)
		}
		for _, h := range hs {
			var ans answer
			select {
			case ans = <-h.reply:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s's held order was never answered", h.user)
			}
			if n := orders(t, ans); n != 2 || ans.Worker != h.from {
				t.Fatalf("%s's held order: orders %d on %s, want 2 on %s", h.user, n, ans.Worker, h.from)
			}
			if n := orders(t, h.tb.send(map[string]any{"op": "order"})); n != 3 {
				t.Fatalf("%s's next order: orders %d, want 3 (the held one ran once)", h.user, n)
			}
		}
	})

	t.Run("stop", func(t *testing.T) {
		p := newProcWith(t, 1, "held", 1, nil, "")
		p.start()
		const people = 3
		var tabs []*tab
		for i := range people {
			b := procBrowser(t, p)
			if code, body := b.do("POST", "/login?user=s"+strconv.Itoa(i)); code != 200 {
				t.Fatalf("login: %d %s", code, body)
			}
			tb := b.openTab("p")
			if n := orders(t, sendRetrying(t, tb, map[string]any{"op": "order"})); n != 1 {
				t.Fatalf("first order: %d", n)
			}
			tabs = append(tabs, tb)
		}
		if code, body := adminDo(t, p.admin, "PUT", "/v1/maintenance/db-a", `{"max_wait":"2m"}`); code != 200 {
			t.Fatalf("starting the window: %d %s", code, body)
		}
		lost := make(chan error, people)
		for _, tb := range tabs {
			go func() {
				_, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "order"}})
				lost <- err
			}()
		}
		waitHeld(t, p.admin, people)
		start := time.Now()
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("stopping with held orders: %v (someone was not parked)\n%s", err, p.out)
		}
		t.Logf("stopped with %d held orders in %v", people, time.Since(start).Round(time.Millisecond))
		for range people {
			if err := <-lost; err == nil {
				t.Fatal("a held order was answered while the window was open")
			}
		}
		p.start()
		if h := p.health(); h.Restart.Parked != people || h.Restart.Missing != 0 {
			t.Fatalf("after the stop: %+v, want %d parked", h.Restart, people)
		}
		if code, body := adminDo(t, p.admin, "DELETE", "/v1/maintenance/db-a", ""); code != 200 {
			t.Fatalf("ending the window: %d %s", code, body)
		}
		// The tab sends its unanswered order again: it had not run, so it
		// runs now, once.
		for i, tb := range tabs {
			tb.connect()
			if n := orders(t, sendRetrying(t, tb, map[string]any{"op": "order"})); n != 2 {
				t.Fatalf("person %d's order sent again after the restart: orders %d, want 2", i, n)
			}
		}
	})
}
