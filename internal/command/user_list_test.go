package command

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// mapsAPI is the real admin API over real maps; it moves nobody.
type mapsAPI struct{ *fsm.FSM }

var errNoMoves = errors.New("this test moves nobody")

func (mapsAPI) Move(context.Context, string, string, string) (move.Result, error) {
	return move.Result{}, errNoMoves
}

func (mapsAPI) MoveToGroup(context.Context, string, string, string) (move.Result, error) {
	return move.Result{}, errNoMoves
}

func (mapsAPI) Drain(context.Context, string, int, func(move.Result, error)) (supervisor.DrainResult, error) {
	return supervisor.DrainResult{}, errNoMoves
}

func (mapsAPI) ForgetUser(context.Context, string) (move.Forgotten, error) {
	return move.Forgotten{}, errNoMoves
}

// pagedAPI serves the admin API over maps holding n people, p0000 on, on
// workers web-1 and web-2 (group web) and db-1 (group db) in turn.
func pagedAPI(t *testing.T, n int) string {
	t.Helper()
	f := fsm.New()
	entries := []struct {
		typ  fsm.MessageType
		body any
	}{{fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: "a", Workers: map[string]string{"web-1": "web", "web-2": "web", "db-1": "db"}}}}
	for i := range n {
		u := fmt.Sprintf("p%04d", i)
		entries = append(entries, struct {
			typ  fsm.MessageType
			body any
		}{fsm.ConnectRequestType, fsm.ConnectRequest{Conn: "c-" + u, User: u, Worker: []string{"web-1", "web-2", "db-1"}[i%3]}})
	}
	for i, e := range entries {
		b, err := fsm.Encode(e.typ, e.body)
		if err != nil {
			t.Fatal(err)
		}
		if err, ok := f.Apply(&raft.Log{Index: uint64(i + 1), Data: b}).(error); ok {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(api.Handler(api.Config{Token: testToken, Supervisor: mapsAPI{f}}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// rowsOf returns the first column of a table's rows, the header left out.
func rowsOf(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "USER ") {
		t.Fatalf("no table header:\n%s", out)
	}
	var names []string
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "USER ") {
			t.Fatalf("the header is printed again mid-table:\n%s", out)
		}
		names = append(names, strings.Fields(l)[0])
	}
	return names
}

// user list prints one page and says how to get the next; -all pages
// through everyone, each once, in one table; the filters reach the API;
// a bad -limit or -state is refused with a message.
func TestUserListPages(t *testing.T) {
	addr := pagedAPI(t, 250)
	args := func(a ...string) []string {
		return append(append([]string{"user", "list"}, a...), "-address", addr, "-token", testToken)
	}

	r := run(t, args()...)
	r.expect(t, 0, nil, []string{"More people follow: add -cursor=", "-all"})
	if got := rowsOf(t, r.stdout); len(got) != 100 || got[0] != "p0000" || got[99] != "p0099" {
		t.Fatalf("the first page: %d rows, %v…", len(got), got[:min(3, len(got))])
	}
	cursor := strings.Fields(strings.SplitN(r.stderr, "-cursor=", 2)[1])[0]
	r = run(t, args("-cursor", cursor, "-limit", "20")...)
	if got := rowsOf(t, r.stdout); len(got) != 20 || got[0] != "p0100" {
		t.Fatalf("the page after the cursor: %v", got)
	}

	for _, tt := range []struct {
		name string
		args []string
		want func(i int) bool
	}{
		{"everyone", []string{"-all", "-limit", "7"}, func(int) bool { return true }},
		{"on web-2", []string{"-all", "-worker", "web-2"}, func(i int) bool { return i%3 == 1 }},
		{"in group web", []string{"-all", "-group", "web", "-limit", "1000"}, func(i int) bool { return i%3 != 2 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, args(tt.args...)...)
			r.expect(t, 0, nil, nil)
			if r.stderr != "" {
				t.Fatalf("-all printed on stderr: %s", r.stderr)
			}
			var want []string
			for i := range 250 {
				if tt.want(i) {
					want = append(want, fmt.Sprintf("p%04d", i))
				}
			}
			if got := rowsOf(t, r.stdout); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("listed %d people, want %d, each once by name:\n%v", len(got), len(want), got)
			}
		})
	}

	run(t, args("-state", "parked")...).expect(t, 0, []string{"Nobody matches"}, nil)
	run(t, args("-limit", "0")...).expect(t, 1, nil, []string{"-limit=0: want 1 to 1000"})
	run(t, args("-limit", "5000")...).expect(t, 1, nil, []string{"-limit=5000: want 1 to 1000"})
	run(t, args("-state", "asleep")...).expect(t, 1, nil, []string{`state "asleep": want live, moving or parked`})
	run(t, args("-cursor", "nonsense")...).expect(t, 1, nil, []string{"cursor"})
}
