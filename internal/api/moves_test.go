package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// workerGroups is a fixed set of ready workers and their groups, as
// usersMaps registers them.
type workerGroups map[string]string

func (g workerGroups) Ready() []string {
	var out []string
	for w := range g {
		out = append(out, w)
	}
	return out
}
func (g workerGroups) GroupOf(w string) string { return g[w] }
func (g workerGroups) Local() []string         { return g.Ready() }

// movingSupervisor is a real supervisor's moves over the maps' reads.
type movingSupervisor struct {
	*supervisor.Supervisor
	f *fsm.FSM
}

func (m movingSupervisor) UsersPage(q fsm.UserQuery) fsm.UserPage { return m.f.UsersPage(q) }
func (m movingSupervisor) Tally() fsm.UserTally                   { return m.f.Tally() }

// A move or a drain that names a worker or a group nobody runs is a 404
// that says so, from the supervisor's own refusal: not "not ready" for a
// worker that does not exist, not "no ready worker" for a group that does
// not exist, not "bad destination" for the worker a drain empties.
func TestMoveRefusalsNameWhatIsMissing(t *testing.T) {
	f := usersMaps(t, 3)
	// No mover: every request here must be refused before the road.
	sup := supervisor.New(f, nil, workerGroups{"w0": "blue", "w1": "blue", "w2": "green"}, nil)
	srv := httptest.NewServer(Handler(Config{Token: "tok", Supervisor: movingSupervisor{sup, f}}))
	defer srv.Close()
	tests := []struct {
		path, body string
		code       int
		want       string
	}{
		{"/v1/users/u0000/move", `{"to":"demo-9"}`, 404, `moving "u0000" to "demo-9": no such worker`},
		{"/v1/users/u0000/move", `{"group":"nogroup"}`, 404, `moving "u0000" to group "nogroup": no such group`},
		{"/v1/users/nobody/move", `{"group":"nogroup"}`, 404, `moving "nobody": no such user`},
		{"/v1/workers/demo-9/drain", ``, 404, `draining "demo-9": no such worker`},
	}
	for _, tt := range tests {
		t.Run(tt.path+" "+tt.body, func(t *testing.T) {
			req, _ := http.NewRequest("POST", srv.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("X-Stickyd-Token", "tok")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e struct{ Error string }
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
			}
			if resp.StatusCode != tt.code || e.Error != tt.want {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, e.Error, tt.code, tt.want)
			}
		})
	}
}
