package client

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const testToken = "s3cret"

// request is what the fake API saw of one call.
type request struct {
	Method, Path, Query, Token, ContentType string
	Body                                    string
}

// fakeAPI answers every call with status and answer and hands what it saw
// to seen.
func fakeAPI(t *testing.T, status int, answer string) (*Client, <-chan request) {
	t.Helper()
	seen := make(chan request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- request{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Token: r.Header.Get("X-Stickyd-Token"),
			ContentType: r.Header.Get("Content-Type"), Body: string(b)}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{Address: srv.URL, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, seen
}

// drain reads a stream to its end.
func drain[T any](s *Stream[T], err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var out []T
	for {
		v, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
}

var since = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// methods is every method of the client: the call it makes and, for a
// recorded answer, what it returns. The answers of the routes the agent
// adds (operator, gateway) are those its handlers write.
var methods = []struct {
	name   string
	call   func(ctx context.Context, c *Client) (any, error)
	method string
	path   string
	query  string
	body   string // "" for none
	answer string
	want   any
}{
	{"Status", func(ctx context.Context, c *Client) (any, error) { return c.Status(ctx) },
		"GET", "/v1/status", "", "",
		`{"name":"a1","leader":"a2","members":[{"id":"a2","address":"10.0.0.2:4651","voter":true,"leader":true}],"workers":[{"id":"web-1","state":"ready"}],"users":3,"connections":4,"applied_index":99,"term":2}`,
		Status{Name: "a1", Leader: "a2", Members: []Peer{{ID: "a2", Address: "10.0.0.2:4651", Voter: true, Leader: true}},
			Workers: []Worker{{ID: "web-1", State: "ready"}}, Users: 3, Conns: 4, Index: 99, Term: 2}},
	{"Events", func(ctx context.Context, c *Client) (any, error) { return c.Events(ctx) },
		"GET", "/v1/events", "", "",
		`[{"at":"2026-11-30T10:00:00Z","kind":"move","id":4,"worker":"web-1","user":"alice","to":"web-2","reason":"cpu 95%"}]`,
		[]Event{{At: since, Kind: "move", ID: 4, Worker: "web-1", User: "alice", To: "web-2", Reason: "cpu 95%"}}},
	{"Monitor", func(ctx context.Context, c *Client) (any, error) { return c.Monitor(ctx, 20) },
		"GET", "/v1/monitor", "limit=20", "",
		`{"at":"2026-11-30T10:00:00Z","agent":"a1","workers":[{"id":"web-1","saturation":{"cpu":0.5}}],"people":[{"user":"alice","busy_seconds":1.5}],"tally":{"users":1}}`,
		MonitorView{At: since, Agent: "a1", Workers: []MonitorWorker{{ID: "web-1", Saturation: map[string]float64{"cpu": 0.5}}},
			People: []MonitorPerson{{User: "alice", BusySeconds: 1.5}}, Tally: UserTally{Users: 1}}},
	{"Users", func(ctx context.Context, c *Client) (any, error) {
		return c.Users(ctx, UsersQuery{Worker: "web 1", Group: "web", State: "live", Cursor: "c1", Limit: 50})
	},
		"GET", "/v1/users", "cursor=c1&group=web&limit=50&state=live&worker=web+1", "",
		`{"users":[{"user":"alice","worker":"web-1","epoch":2,"state":"moving","moving_to":"web-2","conns":1}],"next":"c2"}`,
		UsersPage{Users: []User{{User: "alice", Worker: "web-1", Epoch: 2, State: "moving", MovingTo: "web-2", Conns: 1}}, Next: "c2"}},
	{"User", func(ctx context.Context, c *Client) (any, error) { return c.User(ctx, "a/b") },
		"GET", "/v1/users/a%2Fb", "", "",
		`{"user":"a/b","worker":"web-1","gateway_micros":12,"gateway_calls":1}`,
		User{User: "a/b", Worker: "web-1", GatewayMicros: 12, GatewayCalls: 1}},
	{"Tally", func(ctx context.Context, c *Client) (any, error) { return c.Tally(ctx) },
		"GET", "/v1/tally", "", "",
		`{"users":2,"conns":3,"state":{"live":2},"workers":{"web-1":2},"groups":{"web":2}}`,
		UserTally{Users: 2, Conns: 3, State: map[string]int{"live": 2}, Workers: map[string]int{"web-1": 2}, Groups: map[string]int{"web": 2}}},
	{"MoveUser", func(ctx context.Context, c *Client) (any, error) {
		return c.MoveUser(ctx, "alice", MoveRequest{Group: "web"})
	},
		"POST", "/v1/users/alice/move", "", `{"group":"web"}`,
		`{"user":"alice","from":"web-1","to":"web-2","epoch":3,"outcome":"moved","bytes":10,"conns":1,"pages":2,"freeze_ns":1500000,"duration_ns":3000000}`,
		Move{User: "alice", From: "web-1", To: "web-2", Epoch: 3, Outcome: "moved", Bytes: 10, Conns: 1, Pages: 2, Freeze: 1500 * time.Microsecond, Duration: 3 * time.Millisecond}},
	{"ForgetUser", func(ctx context.Context, c *Client) (any, error) { return c.ForgetUser(ctx, "alice") },
		"POST", "/v1/users/alice/forget", "", "",
		`{"user":"alice","worker":"web-1","conns":2,"package":"sha256:ab"}`,
		Forgotten{User: "alice", Worker: "web-1", Conns: 2, Package: "sha256:ab"}},
	{"Workers", func(ctx context.Context, c *Client) (any, error) { return c.Workers(ctx) },
		"GET", "/v1/workers", "", "",
		`[{"id":"web-1","group":"web","state":"dead","incarnation":2,"ends":[{"incarnation":1,"died_at":"2026-11-30T10:00:00Z","how":"exit status 1"}]}]`,
		[]Worker{{ID: "web-1", Group: "web", State: "dead", Incarnation: 2, Ends: []WorkerEnd{{Incarnation: 1, DiedAt: since, How: "exit status 1"}}}}},
	{"DrainWorker", func(ctx context.Context, c *Client) (any, error) { return drain(c.DrainWorker(ctx, "web-1", 4)) },
		"POST", "/v1/workers/web-1/drain", "parallel=4", "",
		`{"move":{"user":"alice","from":"web-1","to":"web-2","outcome":"moved"}}` + "\n" + `{"done":{"worker":"web-1","users":1,"moved":1}}` + "\n",
		[]DrainProgress{{Move: &Move{User: "alice", From: "web-1", To: "web-2", Outcome: "moved"}}, {Done: &DrainResult{Worker: "web-1", Users: 1, Moved: 1}}}},
	{"Groups", func(ctx context.Context, c *Client) (any, error) { return c.Groups(ctx) },
		"GET", "/v1/groups", "", "",
		`{"default":"web","groups":[{"name":"web","runtime":"builtin","builtin":"demo","workers":2,"created":0,"source":"config","worker_ids":["web-1"],"ready":1,"users":3,"default":true}],"rules":[{"id":"r","group":"web","user":"maria"}],"jobs":null}`,
		GroupsView{Default: "web", Groups: []Group{{GroupRecipe: GroupRecipe{Name: "web", Runtime: "builtin", Builtin: "demo", Workers: 2}, Source: "config",
			WorkerIDs: []string{"web-1"}, Ready: 1, Users: 3, Default: true}}, Rules: []Rule{{ID: "r", Group: "web", User: "maria"}}}},
	{"Group", func(ctx context.Context, c *Client) (any, error) { return c.Group(ctx, "v2") },
		"GET", "/v1/groups/v2", "", "",
		`{"group":{"name":"v2","previous":true},"jobs":[{"id":"j1","kind":"promote","group":"v2","agent":"a1","started":"2026-11-30T10:00:00Z","users":1,"moved":1,"failed":0,"done":true}]}`,
		GroupStatus{Group: Group{GroupRecipe: GroupRecipe{Name: "v2"}, Previous: true},
			Jobs: []Job{{ID: "j1", Kind: "promote", Group: "v2", Agent: "a1", Started: since, Users: 1, Moved: 1, Done: true}}}},
	{"CreateGroup", func(ctx context.Context, c *Client) (any, error) {
		return c.CreateGroup(ctx, "v2", GroupRequest{Bundle: "sha256:ab", Workers: 2, Limits: &GroupLimits{MaxPageBytes: 1024}})
	},
		"PUT", "/v1/groups/v2", "", `{"bundle":"sha256:ab","workers":2,"limits":{"max_page_bytes":1024}}`,
		`{"name":"v2","runtime":"go-plugin","bundle":"sha256:ab","workers":2,"limits":{"max_page_bytes":1024},"created":12}`,
		GroupRecipe{Name: "v2", Runtime: "go-plugin", Bundle: "sha256:ab", Workers: 2, Limits: &GroupLimits{MaxPageBytes: 1024}, Created: 12}},
	{"RetireGroup", func(ctx context.Context, c *Client) (any, error) { return nil, c.RetireGroup(ctx, "v2") },
		"DELETE", "/v1/groups/v2", "", "", `{"retired":"v2"}`, nil},
	{"Rules", func(ctx context.Context, c *Client) (any, error) { return c.Rules(ctx) },
		"GET", "/v1/rules", "", "",
		`[{"id":"qa","group":"canary","attr":"team","value":"qa"}]`,
		[]Rule{{ID: "qa", Group: "canary", Attr: "team", Value: "qa"}}},
	{"PromoteGroup", func(ctx context.Context, c *Client) (any, error) { return c.PromoteGroup(ctx, "v2", "web", 8) },
		"POST", "/v1/groups/v2/promote", "detach=true&from=web&parallel=8", "",
		`{"id":"j1","kind":"promote","group":"v2","from":"web","agent":"a1","started":"2026-11-30T10:00:00Z","users":0,"moved":0,"failed":0,"done":false}`,
		Job{ID: "j1", Kind: "promote", Group: "v2", From: "web", Agent: "a1", Started: since}},
	{"Rollback", func(ctx context.Context, c *Client) (any, error) { return c.Rollback(ctx, 0) },
		"POST", "/v1/rollback", "detach=true", "", `{"id":"j2","kind":"rollback"}`, Job{ID: "j2", Kind: "rollback"}},
	{"PutRule", func(ctx context.Context, c *Client) (any, error) {
		return c.PutRule(ctx, "maria", RuleRequest{Group: "canary", User: "maria"}, 2)
	},
		"PUT", "/v1/rules/maria", "detach=true&parallel=2", `{"group":"canary","user":"maria"}`,
		`{"id":"j3","kind":"assign"}`, Job{ID: "j3", Kind: "assign"}},
	{"DeleteRule", func(ctx context.Context, c *Client) (any, error) { return c.DeleteRule(ctx, "maria", 0) },
		"DELETE", "/v1/rules/maria", "detach=true", "", `{"id":"j4","kind":"assign"}`, Job{ID: "j4", Kind: "assign"}},
	{"FollowJob", func(ctx context.Context, c *Client) (any, error) { return drain(c.FollowJob(ctx, "j1")) },
		"GET", "/v1/jobs/j1", "follow=1", "",
		`{"move":{"user":"alice"},"error":"busy"}` + "\n" + `{"job":{"id":"j1","done":true,"failed":1}}` + "\n",
		[]JobProgress{{Move: &Move{User: "alice"}, Error: "busy"}, {Job: &Job{ID: "j1", Done: true, Failed: 1}}}},
	{"MaintenanceWindows", func(ctx context.Context, c *Client) (any, error) { return c.MaintenanceWindows(ctx) },
		"GET", "/v1/maintenance", "", "",
		`{"backends":[{"backend":"db-a","max_wait":"30s","since":"2026-11-30T10:00:00Z","source":"raft","waiting":3,"timed_out":1}]}`,
		[]MaintenanceWindow{{Backend: "db-a", MaxWait: "30s", Since: since, Source: "raft", Waiting: 3, TimedOut: 1}}},
	{"StartMaintenance", func(ctx context.Context, c *Client) (any, error) {
		return c.StartMaintenance(ctx, "db-a", MaintenanceRequest{Reason: "upgrading", MaxWait: "45s"})
	},
		"PUT", "/v1/maintenance/db-a", "", `{"reason":"upgrading","max_wait":"45s"}`,
		`{"backend":"db-a","reason":"upgrading","max_wait":"45s","since":"2026-11-30T10:00:00Z","source":"consul","waiting":0,"timed_out":0}`,
		MaintenanceWindow{Backend: "db-a", Reason: "upgrading", MaxWait: "45s", Since: since, Source: "consul"}},
	{"EndMaintenance", func(ctx context.Context, c *Client) (any, error) { return c.EndMaintenance(ctx, "db-a") },
		"DELETE", "/v1/maintenance/db-a", "", "",
		`{"backend":"db-a","ended":true,"lasted":"5.2s"}`, MaintenanceEnded{Backend: "db-a", Ended: true, Lasted: "5.2s"}},
	{"GatewayUsage", func(ctx context.Context, c *Client) (any, error) { return c.GatewayUsage(ctx, "s1") },
		"GET", "/v1/gateway/usage", "session=s1", "",
		`{"sessions":{"s1":{"micros":5,"calls":1,"usage":{"input_tokens":3,"cached_input_tokens":1,"output_tokens":2}}},"days":{},"total":{"micros":5,"calls":1,"usage":{"input_tokens":3,"cached_input_tokens":1,"cache_write_tokens":4,"output_tokens":2}},"source":"replica"}`,
		GatewayUsage{GatewayCounters: GatewayCounters{
			Sessions: map[string]GatewayTally{"s1": {Micros: 5, Calls: 1, Usage: TokenUsage{Input: 3, CachedInput: 1, Output: 2}}},
			Days:     map[string]GatewayTally{},
			Total:    GatewayTally{Micros: 5, Calls: 1, Usage: TokenUsage{Input: 3, CachedInput: 1, CacheWrite: 4, Output: 2}}}, Source: "replica"}},
	{"GatewayHealth", func(ctx context.Context, c *Client) (any, error) { return c.GatewayHealth(ctx) },
		"GET", "/v1/gateway/health", "", "",
		`{"m":{"slots":{"capacity":4,"in_flight":1,"queued":0,"queue_max":8},"deployments":{"d":{"degraded":true,"since":"2026-11-30T10:00:00Z","reason":"timeouts","requests_in_window":9,"failures_in_window":5}}}}`,
		map[string]ModelHealth{"m": {Slots: SlotStats{Capacity: 4, InFlight: 1, QueueMax: 8},
			Deployments: map[string]DeploymentHealth{"d": {Degraded: true, Since: since, Reason: "timeouts", Requests: 9, Failures: 5}}}}},
	{"Keyring", func(ctx context.Context, c *Client) (any, error) { return c.Keyring(ctx) },
		"GET", "/v1/operator/keyring", "", "",
		`{"keys":[{"id":"k2","signs":true},{"id":"k1","signs":false}],"source":"generated","index":7,"files":["k2"]}`,
		Keyring{Keys: []KeyringKey{{ID: "k2", Signs: true}, {ID: "k1"}}, Source: "generated", Index: 7, Files: []string{"k2"}}},
	{"RotateKeyring", func(ctx context.Context, c *Client) (any, error) { return c.RotateKeyring(ctx, true) },
		"POST", "/v1/operator/keyring/rotate", "", `{"drop_old":true}`,
		`{"keys":[{"id":"k3","signs":true}],"source":"generated","index":8}`,
		Keyring{Keys: []KeyringKey{{ID: "k3", Signs: true}}, Source: "generated", Index: 8}},
	{"RemovePeer", func(ctx context.Context, c *Client) (any, error) { return nil, c.RemovePeer(ctx, "a3") },
		"POST", "/v1/operator/raft/remove-peer", "", `{"id":"a3"}`, `{"removed":"a3"}`, nil},
	{"TransferLeader", func(ctx context.Context, c *Client) (any, error) { return c.TransferLeader(ctx, "") },
		"POST", "/v1/operator/raft/transfer-leader", "", "", `{"from":"a1","leader":"a2"}`, LeaderTransfer{From: "a1", Leader: "a2"}},
	{"TransferLeader to a voter", func(ctx context.Context, c *Client) (any, error) { return c.TransferLeader(ctx, "a3") },
		"POST", "/v1/operator/raft/transfer-leader", "", `{"id":"a3"}`, `{"from":"a1","leader":"a3"}`, LeaderTransfer{From: "a1", Leader: "a3"}},
	{"Teardown", func(ctx context.Context, c *Client) (any, error) { return drain(c.Teardown(ctx)) },
		"POST", "/v1/operator/teardown", "", "",
		`{"step":"recorded","detail":"index 9"}` + "\n" + `{"step":"done","done":true}` + "\n",
		[]TeardownStep{{Step: "recorded", Detail: "index 9"}, {Step: "done", Done: true}}},
	{"Snapshot", func(ctx context.Context, c *Client) (any, error) {
		rc, err := c.Snapshot(ctx)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		return string(b), err
	},
		"GET", "/v1/operator/snapshot", "", "", "raft snapshot bytes", "raft snapshot bytes"},
}

// Every method calls its route with the token and its body, and decodes the
// answer; every one turns an answer outside 2xx into an *Error with the
// API's status and message.
func TestMethods(t *testing.T) {
	ctx := context.Background()
	for _, m := range methods {
		t.Run(m.name, func(t *testing.T) {
			c, seen := fakeAPI(t, http.StatusOK, m.answer)
			got, err := m.call(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			r := <-seen
			want := request{Method: m.method, Path: m.path, Query: m.query, Token: testToken, Body: m.body}
			if m.body != "" {
				want.ContentType = "application/json"
			}
			if r != want {
				t.Errorf("sent %+v\nwant %+v", r, want)
			}
			if !reflect.DeepEqual(got, m.want) {
				t.Errorf("decoded %#v\nwant    %#v", got, m.want)
			}

			c, seen = fakeAPI(t, http.StatusConflict, `{"error":"refused: reasons"}`)
			_, err = m.call(ctx, c)
			<-seen
			var ae *Error
			if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Message != "refused: reasons" || err.Error() != "refused: reasons" {
				t.Errorf("a 409: %#v", err)
			}
		})
	}
}

// KeepBody hands over the answer as it came, for -json.
func TestKeepBody(t *testing.T) {
	answer := `{"name": "a1",   "future_field": [1, 2]}`
	c, _ := fakeAPI(t, http.StatusOK, answer)
	var body []byte
	st, err := c.Status(context.Background(), KeepBody(&body))
	if err != nil || st.Name != "a1" || string(body) != answer {
		t.Fatalf("status %+v, body %q, %v", st, body, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	ctx := context.Background()
	c, _ := fakeAPI(t, http.StatusOK, `{"name": 3}`)
	_, err := c.Status(ctx)
	var de *DecodeError
	if !errors.As(err, &de) || de.Method != "GET" || de.Path != "/v1/status" || string(de.Body) != `{"name": 3}` ||
		!strings.HasPrefix(err.Error(), "decoding the answer: json: cannot unmarshal number") {
		t.Fatalf("%#v", err)
	}
	// A route that starts a job answering without one.
	c, _ = fakeAPI(t, http.StatusAccepted, `{}`)
	_, err = c.PutRule(ctx, "r", RuleRequest{Group: "g", User: "u"}, 0)
	if !errors.As(err, &de) || !errors.Is(err, ErrNoJob) || string(de.Body) != `{}` || de.Path != "/v1/rules/r" {
		t.Fatalf("%#v", err)
	}
}

// An answer that is not the API's (a proxy's page) is summed up by its
// status and first line.
func TestErrorsOutsideTheAPI(t *testing.T) {
	tests := []struct {
		status int
		body   string
		want   string
	}{
		{502, "<html>bad gateway</html>\nmore", "the admin API answered 502 Bad Gateway: <html>bad gateway</html>"},
		{503, "", "the admin API answered 503 Service Unavailable"},
		{500, strings.Repeat("x", 300), "the admin API answered 500 Internal Server Error: " + strings.Repeat("x", 200) + "..."},
		{404, `{"error": "no group \"x\""}`, `no group "x"`},
	}
	for _, tt := range tests {
		c, _ := fakeAPI(t, tt.status, tt.body)
		_, err := c.Tally(context.Background())
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != tt.status || err.Error() != tt.want {
			t.Errorf("%d %q: %v, want %q", tt.status, tt.body, err, tt.want)
		}
		if IsNotFound(err) != (tt.status == 404) {
			t.Errorf("%d: IsNotFound %v", tt.status, IsNotFound(err))
		}
	}
}

// A cut stream is the decoder's error; a cut tear-down ends as its end does
// (the missing final line says it was cut).
func TestStreamsCutShort(t *testing.T) {
	ctx := context.Background()
	c, _ := fakeAPI(t, http.StatusOK, `{"move":{"user":"alice"}}`+"\n"+`{"job":`)
	lines, err := drain(c.FollowJob(ctx, "j1"))
	if len(lines) != 1 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("%+v, %v", lines, err)
	}
	c, _ = fakeAPI(t, http.StatusOK, `{"step":"recorded"}`+"\n"+`not json`+"\n")
	steps, err := drain(c.Teardown(ctx))
	if len(steps) != 1 || err == nil || !strings.Contains(err.Error(), "invalid character") {
		t.Fatalf("%+v, %v", steps, err)
	}
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.pem")
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	if err := os.WriteFile(ca, pemOf(srv.Certificate().Raw), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string // the address, or the error
	}{
		{"no scheme", Config{Address: " 127.0.0.1:4650 ", Token: "t"}, "http://127.0.0.1:4650"},
		{"prefix", Config{Address: "https://stickyd.example/admin/?x=1#y", Token: "t"}, "https://stickyd.example/admin"},
		{"https with a CA", Config{Address: "127.0.0.1:4650", Token: "t", CAFile: ca}, "https://127.0.0.1:4650"},
		{"no token", Config{Address: "127.0.0.1:4650"}, "no admin token"},
		{"another scheme", Config{Address: "ftp://x", Token: "t"}, `address "ftp://x": want http(s)://HOST:PORT`},
		{"no host", Config{Address: "http://", Token: "t"}, `address "http://": want http(s)://HOST:PORT`},
		{"no CA file", Config{Address: "x:1", Token: "t", CAFile: filepath.Join(dir, "missing.pem")}, "reading the CA file: open "},
		{"not PEM", Config{Address: "x:1", Token: "t", CAFile: notPEM}, "CA file " + notPEM + " holds no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			switch {
			case err != nil && !strings.HasPrefix(err.Error(), tt.want):
				t.Fatalf("%v, want %q", err, tt.want)
			case err == nil && c.Address() != tt.want:
				t.Fatalf("address %q, want %q", c.Address(), tt.want)
			}
		})
	}
	var pe *fs.PathError
	if _, err := New(Config{Address: "x:1", Token: "t", CAFile: filepath.Join(dir, "missing.pem")}); !errors.As(err, &pe) {
		t.Errorf("a missing CA file: %v is not its *fs.PathError", err)
	}
	if _, err := New(Config{Address: "x:1", Token: "t", CAFile: notPEM}); !errors.Is(err, ErrNoPEM) {
		t.Errorf("a file without PEM: %v", err)
	}
	if _, err := New(Config{Address: "ftp://x", Token: "t"}); !errors.Is(err, ErrBadAddress) {
		t.Errorf("a bad address: %v", err)
	}
	if _, err := New(Config{Address: "x:1"}); !errors.Is(err, ErrNoToken) {
		t.Errorf("no token: %v", err)
	}

	// The CA is what the server's certificate is checked against, and
	// TLSServerName the name checked.
	addr := strings.TrimPrefix(srv.URL, "https://")
	c, err := New(Config{Address: addr, Token: "t", CAFile: ca, TLSServerName: "example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RetireGroup(context.Background(), "g"); !IsNotFound(err) {
		t.Fatalf("over TLS: %v", err)
	}
	c, err = New(Config{Address: addr, Token: "t", CAFile: ca, TLSServerName: "elsewhere.example"})
	if err != nil {
		t.Fatal(err)
	}
	var ce *tls.CertificateVerificationError
	if err := c.RetireGroup(context.Background(), "g"); !errors.As(err, &ce) {
		t.Fatalf("a name the certificate lacks: %v", err)
	}
}

// A call is bounded as a whole, a stream only by its dial and handshake.
func TestTimeouts(t *testing.T) {
	c, err := New(Config{Address: "127.0.0.1:4650", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.call.Timeout != callTimeout || c.stream.Timeout != 0 {
		t.Fatalf("call timeout %s, stream timeout %s: want %s and none", c.call.Timeout, c.stream.Timeout, callTimeout)
	}
	if c.tr.DialContext == nil || c.tr.TLSHandshakeTimeout != dialTimeout {
		t.Fatal("the dial is not bounded")
	}
}

func TestTransportErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	c, err := New(Config{Address: dead, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tally(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "cannot reach the stickyd admin API at "+dead+": ") {
		t.Errorf("a dead address: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Tally(ctx); !errors.Is(err, context.Canceled) || err.Error() != "interrupted: context canceled" {
		t.Errorf("a canceled call: %v", err)
	}
}

func pemOf(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
