package command

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/api/client"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/raftnode"
)

// testStatus is a three-member cluster seen from web-a, a follower of
// web-b; web-c does not vote. The members are not sorted, as raft's
// configuration need not be.
var testStatus = agent.Status{
	Name:   "web-a",
	Leader: "web-b",
	Members: []raftnode.Peer{
		{ID: "web-c", Address: "10.0.0.3:4647", Voter: false},
		{ID: "web-a", Address: "10.0.0.1:4647", Voter: true},
		{ID: "web-b", Address: "10.0.0.2:4647", Voter: true, Leader: true},
	},
	Workers: []host.WorkerInfo{
		{ID: "web-a.web-1", Group: "web", State: host.StateReady, Pid: 11, Incarnation: 1},
		{ID: "web-a.web-2", Group: "web", State: host.StateDead, Incarnation: 2},
		{ID: "web-a.web-3", Group: "web", State: host.StateReady, Pid: 13, Incarnation: 1},
		{ID: "web-a.api-1", Group: "api", State: "paused"},
		{ID: "web-a.api-2", Group: "api"},
		{ID: "web-a.api-3", Group: "api", State: host.StateStarting},
	},
	Users: 12,
	Conns: 15,
	Index: 1042,
}

// statusCommands are the commands that read GET /v1/status.
var statusCommands = [][]string{
	{"status"},
	{"server", "members"},
	{"operator", "raft", "list-peers"},
}

// fields splits out into lines and each line into its fields.
func fields(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

func TestStatus(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/status": answer(200, testStatus)})
	r := run(t, f.args("status")...)
	r.expect(t, 0, []string{
		"Name          = web-a\n",
		"Leader        = web-b\n",
		"Applied index = 1042\n",
		"Users         = 12\n",
		"Connections   = 15\n",
		"Workers       = 6 (2 ready, 1 starting, 1 dead, 1 paused, 1 unknown)\n",
		"\n\nMembers\n",
	}, nil)
	if c := f.only(t); c.Method != "GET" || c.Path != "/v1/status" {
		t.Fatalf("called %s %s", c.Method, c.Path)
	}
	_, table, ok := strings.Cut(r.stdout, "Members\n")
	if !ok {
		t.Fatalf("no members table:\n%s", r.stdout)
	}
	want := [][]string{
		{"ID", "ADDRESS", "VOTER", "LEADER"},
		{"web-a", "10.0.0.1:4647", "true", "false"},
		{"web-b", "10.0.0.2:4647", "true", "true"},
		{"web-c", "10.0.0.3:4647", "false", "false"},
	}
	if got := fields(table); !reflect.DeepEqual(got, want) {
		t.Fatalf("members\n%q\nwant\n%q", got, want)
	}
	if testStatus.Members[0].ID != "web-c" {
		t.Fatal("sorting changed the decoded answer's order in place")
	}

	r = run(t, f.args("status", "-json")...)
	r.expect(t, 0, []string{`"applied_index": 1042`, `"connections": 15`, `"pid": 13`}, nil)
	var got agent.Status
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("-json printed no JSON: %v\n%s", err, r.stdout)
	}
	if !reflect.DeepEqual(got, testStatus) {
		t.Fatalf("-json changed the answer:\n%+v\nwant\n%+v", got, testStatus)
	}
}

// TestStatusAlone is an agent that knows no leader and no raft
// configuration (the agent answers "members": null then) and runs no
// workers.
func TestStatusAlone(t *testing.T) {
	alone := agent.Status{Name: "solo"}
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/status": answer(200, alone)})
	r := run(t, f.args("status")...)
	r.expect(t, 0, []string{"Name          = solo\n", "Leader        = none\n", "Workers       = 0\n", "\n\nNo raft members"}, nil)
	if strings.Contains(r.stdout, "ADDRESS") {
		t.Errorf("an empty members table is printed:\n%s", r.stdout)
	}
	run(t, f.args("server", "members")...).expect(t, 0, []string{"No raft members"}, nil)
	run(t, f.args("operator", "raft", "list-peers")...).expect(t, 0, []string{"No raft peers"}, nil)
	for _, args := range statusCommands[1:] {
		if r := run(t, f.args(append(args, "-json")...)...); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("%s -json: exit %d, stdout %q, want []", strings.Join(args, " "), r.code, r.stdout)
		}
	}
}

func TestServerMembers(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/status": answer(200, testStatus)})
	r := run(t, f.args("server", "members")...)
	r.expect(t, 0, nil, nil)
	if c := f.only(t); c.Method != "GET" || c.Path != "/v1/status" {
		t.Fatalf("called %s %s", c.Method, c.Path)
	}
	want := [][]string{
		{"NAME", "ADDRESS", "STATUS", "VOTER"},
		{"web-a", "10.0.0.1:4647", "follower", "true"},
		{"web-b", "10.0.0.2:4647", "leader", "true"},
		{"web-c", "10.0.0.3:4647", "follower", "false"},
	}
	if got := fields(r.stdout); !reflect.DeepEqual(got, want) {
		t.Fatalf("table\n%q\nwant\n%q", got, want)
	}
	checkMembersJSON(t, run(t, f.args("server", "members", "-json")...))
}

func TestOperatorRaftListPeers(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/status": answer(200, testStatus)})
	r := run(t, f.args("operator", "raft", "list-peers")...)
	r.expect(t, 0, nil, nil)
	if c := f.only(t); c.Method != "GET" || c.Path != "/v1/status" {
		t.Fatalf("called %s %s", c.Method, c.Path)
	}
	// Consul's columns, in the configuration's order.
	want := [][]string{
		{"Node", "ID", "Address", "State", "Voter"},
		{"web-c", "web-c", "10.0.0.3:4647", "follower", "false"},
		{"web-a", "web-a", "10.0.0.1:4647", "follower", "true"},
		{"web-b", "web-b", "10.0.0.2:4647", "leader", "true"},
	}
	if got := fields(r.stdout); !reflect.DeepEqual(got, want) {
		t.Fatalf("table\n%q\nwant\n%q", got, want)
	}
	checkMembersJSON(t, run(t, f.args("operator", "raft", "list-peers", "-json")...))
}

// checkMembersJSON checks that -json printed the members of testStatus
// as the API gave them, and nothing else.
func checkMembersJSON(t *testing.T, r result) {
	t.Helper()
	r.expect(t, 0, []string{`"id": "web-b"`, `"leader": true`, `"voter": false`}, nil)
	var got []raftnode.Peer
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("-json printed no members: %v\n%s", err, r.stdout)
	}
	if !reflect.DeepEqual(got, testStatus.Members) {
		t.Fatalf("-json changed the members:\n%+v\nwant\n%+v", got, testStatus.Members)
	}
}

func TestStatusCommandsErrors(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/status": answer(200, testStatus)})
	// An agent whose API has no status (cfg.Status unset), and one whose
	// answer is not JSON.
	none := newFakeAPI(t, nil)
	garbled := newFakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/status": func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`{"members": oops`)) },
	})
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(502)
		_, _ = w.Write([]byte("<html>bad gateway</html>\nmore"))
	}))
	t.Cleanup(bad.Close)
	dead := deadAddress(t)
	doing := map[string]string{
		"status":                   "reading the agent's status: ",
		"server members":           "listing server members: ",
		"operator raft list-peers": "listing raft peers: ",
	}
	for _, args := range statusCommands {
		name := strings.Join(args, " ")
		t.Run(name, func(t *testing.T) {
			for _, tt := range []struct {
				what string
				args []string
				want []string
			}{
				{"wrong token", append(args, "-address", f.URL, "-token", "guess"), []string{doing[name] + "wrong admin token"}},
				{"no token", append(args, "-address", f.URL), []string{"no admin token: set STICKYD_TOKEN or pass -token"}},
				{"no route", none.args(args...), []string{doing[name] + "no API route GET /v1/status"}},
				{"garbled", garbled.args(args...), []string{doing[name] + "decoding the answer: "}},
				{"not JSON", append(args, "-address", bad.URL, "-token", testToken), []string{doing[name] + "the admin API answered 502 Bad Gateway: <html>bad gateway</html>"}},
				{"dead", append(args, "-address", dead, "-token", testToken), []string{doing[name] + "cannot reach the stickyd admin API at " + dead + ": ", "connection refused"}},
				{"bad address", append(args, "-address", "ftp://x", "-token", testToken), []string{`bad -address "ftp://x"`}},
				{"stray argument", f.args(append(args, "extra")...), []string{"unexpected arguments: extra", "Usage: stickyd " + name}},
				{"unknown flag", f.args(append(args, "-nope")...), []string{"-nope", "Usage: stickyd " + name}},
			} {
				r := run(t, tt.args...)
				r.expect(t, 1, nil, tt.want)
				if r.stdout != "" {
					t.Errorf("%s: stdout %q on an error", tt.what, r.stdout)
				}
			}
		})
	}
	// Only the wrong-token runs reached f, with the token given.
	calls := f.Calls()
	if len(calls) != len(statusCommands) {
		t.Fatalf("the API saw %d calls, want %d: %+v", len(calls), len(statusCommands), calls)
	}
	for _, c := range calls {
		if c.Token != "guess" {
			t.Fatalf("sent token %q, want the one given", c.Token)
		}
	}
}

func TestStatusCommandsHelp(t *testing.T) {
	for _, args := range statusCommands {
		name := strings.Join(args, " ")
		t.Run(name, func(t *testing.T) {
			run(t, append(args, "-help")...).expect(t, 0, []string{"Usage: stickyd " + name + " [options]", "-json", "-address=ADDR", "-token=TOKEN", "$STICKYD_TOKEN"}, nil)
		})
	}
	for _, parent := range []struct {
		name []string
		subs []string
	}{
		{[]string{"server"}, []string{"members", "List the raft members"}},
		{[]string{"operator"}, []string{"raft", "Look at the raft cluster"}},
		{[]string{"operator", "raft"}, []string{"list-peers", "List the raft peers"}},
	} {
		name := strings.Join(parent.name, " ")
		t.Run(name, func(t *testing.T) {
			want := append([]string{"Usage: stickyd " + name + " <subcommand>", "Subcommands:"}, parent.subs...)
			run(t, parent.name...).expect(t, 1, nil, want)
			run(t, append(parent.name, "-help")...).expect(t, 0, want, nil)
		})
	}
	run(t, "-help").expect(t, 0, []string{
		"status", "Show the agent's view of the cluster",
		"server", "Look at the servers of the cluster",
		"operator", "Tools for cluster operators",
	}, nil)
}

func TestWorkerCounts(t *testing.T) {
	ws := func(states ...string) []client.Worker {
		out := make([]client.Worker, len(states))
		for i, s := range states {
			out[i] = client.Worker{State: s}
		}
		return out
	}
	tests := []struct {
		workers []client.Worker
		want    string
	}{
		{nil, "0"},
		{ws("ready"), "1 (1 ready)"},
		{ws("stopped", "refused", "dead", "starting", "ready", "ready"), "6 (2 ready, 1 starting, 1 dead, 1 refused, 1 stopped)"},
		{ws("zeta", "", "alpha", "zeta", "ready"), "5 (1 ready, 1 alpha, 1 unknown, 2 zeta)"},
	}
	for _, tt := range tests {
		if got := workerCounts(tt.workers); got != tt.want {
			t.Errorf("workerCounts(%v) = %q, want %q", tt.workers, got, tt.want)
		}
	}
}
