package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// mapsSupervisor serves the API's reads from real maps; it moves nobody.
type mapsSupervisor struct{ *fsm.FSM }

var errNoMoves = errors.New("this test moves nobody")

func (mapsSupervisor) Move(context.Context, string, string, string) (move.Result, error) {
	return move.Result{}, errNoMoves
}

func (mapsSupervisor) MoveToGroup(context.Context, string, string, string) (move.Result, error) {
	return move.Result{}, errNoMoves
}

func (mapsSupervisor) Drain(context.Context, string, int, func(move.Result, error)) (supervisor.DrainResult, error) {
	return supervisor.DrainResult{}, errNoMoves
}

func (mapsSupervisor) ForgetUser(context.Context, string) (move.Forgotten, error) {
	return move.Forgotten{}, errNoMoves
}

// usersMaps fills maps with n people on workers w0, w1, w2 (groups blue:
// w0 and w1, green: w2); every tenth person is parked on their worker.
func usersMaps(t *testing.T, n int) *fsm.FSM {
	t.Helper()
	f := fsm.New()
	idx := uint64(0)
	apply := func(typ fsm.MessageType, body any) {
		t.Helper()
		b, err := fsm.Encode(typ, body)
		if err != nil {
			t.Fatal(err)
		}
		idx++
		if err, ok := f.Apply(&raft.Log{Index: idx, Data: b}).(error); ok {
			t.Fatalf("applying %T: %v", body, err)
		}
	}
	apply(fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: "a", Workers: map[string]string{"w0": "blue", "w1": "blue", "w2": "green"}})
	for i := range n {
		u, w := fmt.Sprintf("u%04d", i), fmt.Sprintf("w%d", i%3)
		apply(fsm.ConnectRequestType, fsm.ConnectRequest{Conn: "c-" + u, User: u, Worker: w})
		if i%10 == 0 {
			info, _ := f.User(u)
			apply(fsm.MoveBeginRequestType, fsm.MoveBeginRequest{User: u, From: w, To: w, Epoch: info.Epoch})
			apply(fsm.MoveCommitRequestType, fsm.MoveCommitRequest{User: u, To: w, Epoch: info.Epoch + 1, Package: "pkg-" + u})
		}
	}
	return f
}

// Walking GET /v1/users by its cursor lists every person once, in name
// order, through every filter and page size; the tally counts them all
// without listing; bad parameters are a 400 that says what is wrong.
func TestUsersPaged(t *testing.T) {
	const n = 1234
	f := usersMaps(t, n)
	srv := httptest.NewServer(Handler(Config{Token: "tok", Supervisor: mapsSupervisor{f}}))
	defer srv.Close()
	get := func(path string, query url.Values) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path+"?"+query.Encode(), nil)
		req.Header.Set("X-Stickyd-Token", "tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	walk := func(query url.Values) []placement.UserInfo {
		t.Helper()
		var all []placement.UserInfo
		for pages := 0; ; pages++ {
			if pages > n {
				t.Fatalf("%v: the pages never end", query)
			}
			code, body := get("/v1/users", query)
			if code != 200 {
				t.Fatalf("%v: %d %s", query, code, body)
			}
			var p monitor.Page
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("%v: decoding %s: %v", query, body, err)
			}
			limit := monitor.DefaultLimit
			if query.Get("limit") != "" {
				fmt.Sscan(query.Get("limit"), &limit)
			}
			if len(p.Users) > limit || (p.Next != "" && len(p.Users) != limit) {
				t.Fatalf("%v: a page of %d people with limit %d, next %q", query, len(p.Users), limit, p.Next)
			}
			all = append(all, p.Users...)
			if p.Next == "" {
				return all
			}
			query.Set("cursor", p.Next)
		}
	}
	for _, tt := range []struct {
		name  string
		query url.Values
		keep  func(i int) bool
	}{
		{"everyone by the default page", url.Values{}, func(int) bool { return true }},
		{"everyone by pages of 7", url.Values{"limit": {"7"}}, func(int) bool { return true }},
		{"everyone in one page", url.Values{"limit": {"1000"}}, func(int) bool { return true }},
		{"worker w1", url.Values{"worker": {"w1"}, "limit": {"50"}}, func(i int) bool { return i%3 == 1 }},
		{"group blue", url.Values{"group": {"blue"}}, func(i int) bool { return i%3 != 2 }},
		{"parked", url.Values{"state": {"parked"}, "limit": {"9"}}, func(i int) bool { return i%10 == 0 }},
		{"live on group green", url.Values{"state": {"live"}, "group": {"green"}}, func(i int) bool { return i%10 != 0 && i%3 == 2 }},
		{"a worker nobody is on", url.Values{"worker": {"w9"}}, func(int) bool { return false }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := walk(tt.query)
			var want []string
			for i := range n {
				if tt.keep(i) {
					want = append(want, fmt.Sprintf("u%04d", i))
				}
			}
			if len(got) != len(want) {
				t.Fatalf("%d people listed, want %d", len(got), len(want))
			}
			for i, u := range got {
				if u.User != want[i] {
					t.Fatalf("person %d is %s, want %s (each once, by name)", i, u.User, want[i])
				}
				if st := tt.query.Get("state"); st != "" && u.State != st {
					t.Fatalf("%s is %s, asked for %s", u.User, u.State, st)
				}
			}
		})
	}

	code, body := get("/v1/tally", nil)
	var tally fsm.UserTally
	if err := json.Unmarshal(body, &tally); code != 200 || err != nil {
		t.Fatalf("tally: %d %s %v", code, body, err)
	}
	parked := (n + 9) / 10
	if tally.Users != n || tally.State[placement.StateParked] != parked || tally.State[placement.StateLive] != n-parked ||
		tally.Workers["w2"] != n/3 || tally.Groups["blue"] != n-n/3 {
		t.Fatalf("tally %+v", tally)
	}

	for _, tt := range []struct{ query, want string }{
		{"limit=0", "limit"},
		{"limit=-3", "limit"},
		{"limit=1001", "limit"},
		{"limit=lots", "limit"},
		{"state=sleeping", "state"},
		{"cursor=u0007", "cursor"},
		{"cursor=" + url.QueryEscape("%%%"), "cursor"},
	} {
		q, _ := url.ParseQuery(tt.query)
		code, body := get("/v1/users", q)
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Error, tt.want) {
			t.Errorf("GET /v1/users?%s: %d %s, want 400 naming the %s", tt.query, code, body, tt.want)
		}
	}
}
