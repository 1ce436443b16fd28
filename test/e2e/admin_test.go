package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/agent"
)

func adminCall(t *testing.T, a *agent.Agent, method, path, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+a.AdminAddr()+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("X-Stickyd-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The operator's surface: admin calls need the token; users are listed,
// moved and drained through the API, with progress streamed for a drain.
func TestAdminAPI(t *testing.T) {
	a := startAgentWith(t, "subprocess", 3, withDataDir(t))
	var tabs []*tab
	for _, u := range []string{"ida", "jon", "kim", "lea", "max"} {
		b := newBrowser(t, a)
		b.do("POST", "/login?user="+u)
		tb := b.openTab("p")
		tb.send(map[string]any{"op": "inc"})
		tabs = append(tabs, tb)
	}
	for _, tt := range []struct {
		token string
		code  int
		want  string
	}{
		{"", 401, "missing admin token"},
		{"nope", 403, "wrong admin token"},
		{testToken, 200, `"user":"ida"`},
	} {
		code, body := adminCall(t, a, "GET", "/v1/users", tt.token, "")
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Fatalf("GET /v1/users with token %q: %d %s", tt.token, code, body)
		}
	}
	for _, bad := range []struct{ body, want string }{
		{`{}`, "exactly one"},
		{`{"to":"web-1","group":"web"}`, "exactly one"},
		{`{"colour":"red"}`, "unknown field"},
		{`not json`, "decoding"},
	} {
		code, body := adminCall(t, a, "POST", "/v1/users/ida/move", testToken, bad.body)
		if code != 400 || !strings.Contains(body, bad.want) {
			t.Fatalf("move with %s: %d %s", bad.body, code, body)
		}
	}
	for _, missing := range []struct{ body, want string }{
		{`{"to":"nowhere"}`, `to \"nowhere\": no such worker`},
		{`{"group":"nogroup"}`, `to group \"nogroup\": no such group`},
	} {
		code, body := adminCall(t, a, "POST", "/v1/users/ida/move", testToken, missing.body)
		if code != 404 || !strings.Contains(body, missing.want) {
			t.Fatalf("move with %s: %d %s", missing.body, code, body)
		}
	}
	if code, body := adminCall(t, a, "POST", "/v1/users/nobody/move", testToken, `{"group":"web"}`); code != 404 {
		t.Fatalf("move of an unknown user: %d %s", code, body)
	}
	u, _ := a.Supervisor().User("ida")
	to := otherWorker(a.Pool().Ready(), u.Worker)
	code, body := adminCall(t, a, "POST", "/v1/users/ida/move", testToken, `{"to":"`+to+`"}`)
	if code != 200 || !strings.Contains(body, `"outcome":"moved"`) {
		t.Fatalf("move: %d %s", code, body)
	}

	// Drain the worker holding the most people; progress is one line per move.
	load := map[string]int{}
	for _, u := range a.Supervisor().Users() {
		load[u.Worker]++
	}
	victim := ""
	for w, n := range load {
		if victim == "" || n > load[victim] {
			victim = w
		}
	}
	req, _ := http.NewRequest("POST", "http://"+a.AdminAddr()+"/v1/workers/"+victim+"/drain?parallel=2", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	moved, lines := 0, 0
	sc := bufio.NewScanner(resp.Body)
	var done struct {
		Done *struct{ Users, Moved, Failed int } `json:"done"`
		Move *struct{ Outcome string }           `json:"move"`
	}
	for sc.Scan() {
		lines++
		done.Done, done.Move = nil, nil
		if err := json.Unmarshal(sc.Bytes(), &done); err != nil {
			t.Fatalf("drain line %q: %v", sc.Text(), err)
		}
		if done.Move != nil && done.Move.Outcome == "moved" {
			moved++
		}
	}
	if done.Done == nil || done.Done.Moved != load[victim] || done.Done.Failed != 0 || moved != load[victim] || lines != load[victim]+1 {
		t.Fatalf("drain of %s (%d people): %d lines, %d moved, done %+v", victim, load[victim], lines, moved, done.Done)
	}
	for _, u := range a.Supervisor().Users() {
		if u.Worker == victim {
			t.Fatalf("%s still on the drained worker", u.User)
		}
	}
	// Everyone keeps working where they landed.
	for _, tb := range tabs {
		tb.send(map[string]any{"op": "inc"})
		tb.drainUntil("count", 2)
	}
	if code, body := adminCall(t, a, "POST", "/v1/workers/nope/drain", testToken, ""); code != 404 || !strings.Contains(body, `draining \"nope\": no such worker`) {
		t.Fatalf("drain of an unknown worker: %d %s", code, body)
	}
	if code, body := adminCall(t, a, "GET", "/v1/metrics", testToken, ""); code != 200 || !strings.Contains(body, `stickyd_move_moves_total{outcome="moved",reason="drain"}`) {
		t.Fatalf("metrics: %d %s", code, body)
	}
}
