package command

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
)

var testUsers = []placement.UserInfo{
	{User: "carol", Worker: "web-2", Epoch: 3, State: placement.StateParked, Package: "pkg-c", Conns: 0},
	{User: "alice", Worker: "web-1", Epoch: 7, State: placement.StateLive, Conns: 2},
	{User: "bob", Worker: "web-1", Epoch: 12, State: placement.StateMoving, MovingTo: "web-3", Conns: 1},
}

func TestUserList(t *testing.T) {
	users := slices.Clone(testUsers)
	users[1].Seen = time.Now().Unix() - 90
	// The API answers by name.
	slices.SortFunc(users, func(a, b placement.UserInfo) int { return strings.Compare(a.User, b.User) })
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/users": answer(200, monitor.Page{Users: users})})
	r := run(t, f.args("user", "list")...)
	r.expect(t, 0, []string{"USER", "WORKER", "STATE", "EPOCH", "CONNS", "SEEN"}, nil)
	if c := f.only(t); c.Method != "GET" || c.Path != "/v1/users" {
		t.Fatalf("called %s %s", c.Method, c.Path)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 rows:\n%s", r.stdout)
	}
	want := [][]string{
		{"USER", "WORKER", "STATE", "EPOCH", "CONNS", "SEEN"},
		{"alice", "web-1", "live", "7", "2", "1m30s", "ago"},
		{"bob", "web-1", "moving", "→", "web-3", "12", "1", "-"},
		{"carol", "web-2", "parked", "3", "0", "-"},
	}
	for i, l := range lines {
		got := strings.Fields(l)
		if i == 1 && len(got) == 7 && got[5] == "1m31s" {
			got[5] = "1m30s" // a second went by since the time was set
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("row %d = %q, want %q", i, got, want[i])
		}
	}
}

func TestUserListJSONAndEmpty(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/users": answer(200, monitor.Page{Users: testUsers})})
	r := run(t, f.args("user", "list", "-json")...)
	r.expect(t, 0, nil, nil)
	var got monitor.Page
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("-json printed no JSON: %v\n%s", err, r.stdout)
	}
	if !reflect.DeepEqual(got.Users, testUsers) {
		t.Fatalf("-json changed the answer:\n%+v\nwant\n%+v", got, testUsers)
	}

	empty := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/users": answer(200, monitor.Page{})})
	run(t, empty.args("user", "list")...).expect(t, 0, []string{"No users"}, nil)
	run(t, empty.args("user", "list", "-worker", "web-9")...).expect(t, 0, []string{"Nobody matches"}, nil)
}

func TestUserShow(t *testing.T) {
	bob := testUsers[2]
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/users/{user}": func(w http.ResponseWriter, r *http.Request) {
			if r.PathValue("user") != "bob/the builder" {
				writeError(w, 404, "no user "+r.PathValue("user"))
				return
			}
			writeJSON(w, 200, bob)
		},
	})
	r := run(t, f.args("user", "show", "bob/the builder")...)
	r.expect(t, 0, []string{"User      = bob", "Worker    = web-1", "State     = moving", "Moving to = web-3", "Epoch     = 12", "Conns     = 1"}, nil)
	if strings.Contains(r.stdout, "Package") {
		t.Errorf("an empty package is shown:\n%s", r.stdout)
	}
	if c := f.only(t); c.RawPath != "/v1/users/bob%2Fthe%20builder" {
		t.Fatalf("path %q: the name is not escaped", c.RawPath)
	}

	// Flags may come after the name.
	f2 := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/users/{user}": answer(200, testUsers[0])})
	r = run(t, append([]string{"user", "show", "carol", "-json"}, f2.args()...)...)
	r.expect(t, 0, []string{`"package": "pkg-c"`, `"user": "carol"`}, nil)

	// What the person's gateway calls cost, when they made any.
	dan := placement.UserInfo{User: "dan", Worker: "web-2", State: "live", GatewayMicros: 1_234_567, GatewayCalls: 3}
	f3 := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/users/{user}": answer(200, dan)})
	r = run(t, f3.args("user", "show", "dan")...)
	r.expect(t, 0, []string{"AI gateway cost = $1.234567 in 3 calls"}, nil)
}

func TestUserMove(t *testing.T) {
	res := move.Result{User: "alice", From: "web-1", To: "web-2", Epoch: 8, Outcome: move.Moved,
		Bytes: 12 * 1024, Conns: 2, Pages: 3, Freeze: 1500 * time.Microsecond, Duration: 3 * time.Millisecond}
	tests := []struct {
		name string
		args []string
		body api.MoveRequest
	}{
		{"to", []string{"alice", "-to", "web-2"}, api.MoveRequest{To: "web-2"}},
		{"group", []string{"-group", "web", "alice"}, api.MoveRequest{Group: "web"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, map[string]http.HandlerFunc{"POST /v1/users/{user}/move": answer(200, res)})
			r := run(t, f.args(append([]string{"user", "move"}, tt.args...)...)...)
			r.expect(t, 0, []string{"moved alice web-1 → web-2", "Epoch  = 8", "Bytes  = 12 KiB (12288 bytes)",
				"Pages  = 3", "Conns  = 2", "Freeze = 1.5 ms", "Total  = 3 ms"}, nil)
			c := f.only(t)
			if c.Method != "POST" || c.Path != "/v1/users/alice/move" {
				t.Fatalf("called %s %s", c.Method, c.Path)
			}
			var body api.MoveRequest
			dec := json.NewDecoder(bytes.NewReader(c.Body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil || body != tt.body {
				t.Fatalf("body %s (%v), want %+v", c.Body, err, tt.body)
			}
		})
	}
}

func TestUserMoveFails(t *testing.T) {
	// The agent's message is printed once: after the command's context
	// when it says nothing of what was being done, alone when it does.
	const ctx = `moving user "alice" to web-9: `
	tests := []struct {
		name   string
		status int
		msg    string
		want   string
	}{
		{"rolled back", 409, "move rolled back: the person stays home", ctx + "move rolled back: the person stays home"},
		{"unknown user", 404, `no user "alice"`, ctx + `no user "alice"`},
		{"unknown worker", 404, `moving "alice" to "web-9": no such worker`, `moving "alice" to "web-9": no such worker`},
		{"unknown group", 404, `moving "alice" to group "nogroup": no such group`, `moving "alice" to group "nogroup": no such group`},
		{"another context", 503, `reading the maps: closed`, ctx + `reading the maps: closed`},
		{"worker not ready", 400, `moving "alice": bad destination: worker "web-9" is not ready`, `moving "alice": bad destination: worker "web-9" is not ready`},
		{"busy", 409, "user is busy", ctx + "user is busy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, map[string]http.HandlerFunc{
				"POST /v1/users/{user}/move": func(w http.ResponseWriter, r *http.Request) { writeError(w, tt.status, tt.msg) },
			})
			dest := []string{"-to", "web-9"}
			if strings.Contains(tt.msg, "group") {
				dest = []string{"-group", "nogroup"}
			}
			r := run(t, f.args(append([]string{"user", "move", "alice"}, dest...)...)...)
			if got := strings.TrimSpace(r.stderr); got != tt.want {
				t.Fatalf("exit %d, stderr %q, want %q", r.code, got, tt.want)
			}
			r.expect(t, 1, nil, nil)
			if r.stdout != "" {
				t.Fatalf("a failed move printed %q", r.stdout)
			}
		})
	}
}

func TestUserUsageErrors(t *testing.T) {
	f := newFakeAPI(t, nil)
	tests := []struct {
		args []string
		err  string
	}{
		{[]string{"user", "move", "alice"}, "give exactly one of -to WORKER and -group GROUP"},
		{[]string{"user", "move", "alice", "-to", "a", "-group", "b"}, "give exactly one of"},
		{[]string{"user", "move", "-to", "web-2"}, "missing arguments"},
		{[]string{"user", "move", "alice", "bob", "-to", "web-2"}, "unexpected arguments: bob"},
		{[]string{"user", "show"}, "Usage: stickyd user show"},
		{[]string{"user", "list", "extra"}, "unexpected arguments: extra"},
		{[]string{"user", "list", "-nope"}, "flag provided but not defined: -nope"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			run(t, f.args(tt.args...)...).expect(t, 1, nil, []string{tt.err})
		})
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("usage errors called the API: %+v", calls)
	}
}

func TestUserForget(t *testing.T) {
	res := move.Forgotten{User: "alice", Worker: "web-1", Conns: 2, Package: "sha256:abc"}
	f := newFakeAPI(t, map[string]http.HandlerFunc{"POST /v1/users/{user}/forget": answer(200, res)})
	run(t, f.args("user", "forget", "alice")...).expect(t, 0, []string{"forgot alice", "Worker  = web-1", "Conns   = 2", "Package = sha256:abc"}, nil)
	if c := f.only(t); c.Method != "POST" || c.Path != "/v1/users/alice/forget" {
		t.Fatalf("called %s %s", c.Method, c.Path)
	}
	f = newFakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/users/{user}/forget": func(w http.ResponseWriter, r *http.Request) { writeError(w, 409, "alice is moving") },
	})
	r := run(t, f.args("user", "forget", "alice")...)
	r.expect(t, 1, nil, []string{`forgetting user "alice": alice is moving`})
	run(t, f.args("user", "forget")...).expect(t, 1, nil, nil)
}
