package command

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
)

// maintenanceList answers GET /v1/maintenance with windows.
func maintenanceList(windows ...client.MaintenanceWindow) http.HandlerFunc {
	if windows == nil {
		windows = []client.MaintenanceWindow{}
	}
	return answer(200, map[string]any{"backends": windows})
}

// decodeStrict decodes a request body, refusing fields the API does not
// take.
func decodeStrict(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
}

func TestMaintenanceStart(t *testing.T) {
	since := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		args []string
		want client.MaintenanceRequest
	}{
		{"defaults", []string{"db-a"}, client.MaintenanceRequest{MaxWait: "30s"}},
		{"flags after the backend", []string{"db-a", "-reason", "upgrading to 16.4", "-max-wait", "90s"}, client.MaintenanceRequest{Reason: "upgrading to 16.4", MaxWait: "1m30s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, map[string]http.HandlerFunc{
				"PUT /v1/maintenance/{backend}": func(w http.ResponseWriter, r *http.Request) {
					var req client.MaintenanceRequest
					_ = json.NewDecoder(r.Body).Decode(&req)
					writeJSON(w, 200, client.MaintenanceWindow{Backend: r.PathValue("backend"), Reason: req.Reason, MaxWait: req.MaxWait, Since: since, Source: "raft"})
				},
			})
			r := run(t, f.args(append([]string{"maintenance", "start"}, tt.args...)...)...)
			r.expect(t, 0, []string{
				"Backend db-a is in maintenance: requests that need it wait, at most " + tt.want.MaxWait + " each",
				"Backend  = db-a",
				"Since    = " + since.Local().Format(time.RFC3339),
				"Max wait = " + tt.want.MaxWait,
				"End it with: stickyd maintenance end db-a",
			}, nil)
			if tt.want.Reason != "" && !strings.Contains(r.stdout, "Reason   = "+tt.want.Reason) {
				t.Errorf("the reason is not shown:\n%s", r.stdout)
			}
			c := f.only(t)
			if c.Method != "PUT" || c.Path != "/v1/maintenance/db-a" {
				t.Fatalf("called %s %s", c.Method, c.Path)
			}
			var body client.MaintenanceRequest
			decodeStrict(t, c.Body, &body)
			if body != tt.want {
				t.Fatalf("body %+v, want %+v", body, tt.want)
			}
		})
	}
}

func TestMaintenanceEnd(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"DELETE /v1/maintenance/{backend}": func(w http.ResponseWriter, r *http.Request) {
			if b := r.PathValue("backend"); b != "db-a" {
				writeError(w, 404, "backend "+b+" is not in maintenance")
				return
			}
			writeJSON(w, 200, client.MaintenanceEnded{Backend: "db-a", Ended: true, Lasted: "5.2s"})
		},
	})
	r := run(t, f.args("maintenance", "end", "db-a")...)
	r.expect(t, 0, []string{"Backend db-a is out of maintenance; the window lasted 5.2s."}, nil)
	if c := f.only(t); c.Method != "DELETE" || c.Path != "/v1/maintenance/db-a" || len(c.Body) != 0 {
		t.Fatalf("called %s %s with %q", c.Method, c.Path, c.Body)
	}

	r = run(t, f.args("maintenance", "end", "db-b")...)
	r.expect(t, 1, nil, []string{"ending maintenance of db-b: backend db-b is not in maintenance"})
	if r.stdout != "" {
		t.Fatalf("a failed end printed %q", r.stdout)
	}
}

func TestMaintenanceStatus(t *testing.T) {
	since := time.Now().Add(-(3*time.Hour + 10*time.Minute + 30*time.Second)).Truncate(time.Second)
	windows := []client.MaintenanceWindow{
		{Backend: "db-a", Reason: "upgrading to 16.4", MaxWait: "30s", Since: since, Source: "raft", Waiting: 3, TimedOut: 1},
		{Backend: "search", MaxWait: "5m0s", Since: since, Source: "consul"},
	}
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/maintenance": maintenanceList(windows...)})
	r := run(t, f.args("maintenance", "status")...)
	r.expect(t, 0, nil, nil)
	if c := f.only(t); c.Method != "GET" || c.Path != "/v1/maintenance" {
		t.Fatalf("called %s %s", c.Method, c.Path)
	}
	stamp := since.Local().Format(time.RFC3339)
	want := [][]string{
		{"BACKEND", "REASON", "SINCE", "AGE", "MAX-WAIT", "WAITING", "TIMED-OUT", "SOURCE"},
		{"db-a", "upgrading to 16.4", stamp, "3h10m", "30s", "3", "1", "raft"},
		{"search", "-", stamp, "3h10m", "5m0s", "0", "0", "consul"},
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != len(want) {
		t.Fatalf("want %d lines:\n%s", len(want), r.stdout)
	}
	for i, l := range lines {
		// Columns are three spaces apart or more; the reason has single
		// spaces.
		var got []string
		for _, f := range strings.Split(l, "   ") {
			if f = strings.TrimSpace(f); f != "" {
				got = append(got, f)
			}
		}
		if strings.Join(got, "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d = %q, want %q", i, got, want[i])
		}
	}

	r = run(t, f.args("maintenance", "status", "-json")...)
	r.expect(t, 0, []string{`"backend": "db-a"`, `"timed_out": 1`, `"source": "consul"`}, nil)
	var got struct {
		Backends []client.MaintenanceWindow `json:"backends"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.Backends) != 2 || !got.Backends[0].Since.Equal(since) {
		t.Fatalf("-json: %v %+v", err, got)
	}

	empty := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/maintenance": maintenanceList()})
	run(t, empty.args("maintenance", "status")...).expect(t, 0, []string{"No backend is in maintenance."}, nil)
}

func TestMaintenanceAPIErrors(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"PUT /v1/maintenance/{backend}": func(w http.ResponseWriter, r *http.Request) {
			writeError(w, 400, "max_wait: want 1s to 1h")
		},
		"GET /v1/maintenance": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html>upstream down</html>"))
		},
	})
	run(t, f.args("maintenance", "start", "db-a")...).expect(t, 1, nil, []string{"starting maintenance of db-a: max_wait: want 1s to 1h"})
	run(t, f.args("maintenance", "status")...).expect(t, 1, nil, []string{"listing maintenance windows: the admin API answered 502 Bad Gateway: <html>upstream down</html>"})
	run(t, "maintenance", "status", "-address", deadAddress(t), "-token", testToken).expect(t, 1, nil, []string{"cannot reach the stickyd admin API"})
	run(t, "maintenance", "end", "db-a", "-address", f.URL).expect(t, 1, nil, []string{"no admin token"})
}

func TestMaintenanceUsageErrors(t *testing.T) {
	f := newFakeAPI(t, nil)
	tests := []struct {
		args []string
		err  string
	}{
		{[]string{"maintenance", "start"}, "missing arguments"},
		{[]string{"maintenance", "start", "db-a", "db-b"}, "unexpected arguments: db-b"},
		{[]string{"maintenance", "start", "db-a", "-max-wait", "soon"}, `-max-wait="soon": want a duration from 1s to 1h`},
		{[]string{"maintenance", "start", "db-a", "-max-wait", "500ms"}, `-max-wait="500ms"`},
		{[]string{"maintenance", "start", "db-a", "-max-wait", "2h"}, `-max-wait="2h"`},
		{[]string{"maintenance", "start", "DB A"}, `backend "DB A": want 1 to 63 of a-z 0-9 _ . -`},
		{[]string{"maintenance", "start", "db-a", "-nope"}, "flag provided but not defined: -nope"},
		{[]string{"maintenance", "end"}, "Usage: stickyd maintenance end"},
		{[]string{"maintenance", "end", "db-a", "db-b"}, "unexpected arguments: db-b"},
		{[]string{"maintenance", "end", "-db"}, "flag provided but not defined: -db"},
		{[]string{"maintenance", "status", "db-a"}, "unexpected arguments: db-a"},
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

func TestMaintenanceHelp(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"maintenance"}, []string{"Usage: stickyd maintenance <subcommand>", "consul kv put stickyd/maintenance/db-a", "consul kv delete", "start", "end", "status"}},
		{[]string{"maintenance", "start", "-help"}, []string{"Usage: stickyd maintenance start [options] BACKEND", "-reason=TEXT", "-max-wait=DURATION", "-token=TOKEN"}},
		{[]string{"maintenance", "end", "-help"}, []string{"Usage: stickyd maintenance end [options] BACKEND", "exits 1"}},
		{[]string{"maintenance", "status", "-help"}, []string{"Usage: stickyd maintenance status [options]", "-json"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := run(t, tt.args...)
			for _, s := range tt.want {
				if !strings.Contains(r.stdout+r.stderr, s) {
					t.Errorf("help lacks %q:\n%s%s", s, r.stdout, r.stderr)
				}
			}
		})
	}
	if got := formatAge(time.Now().Add(-50*time.Hour), time.Now()); got != "2d2h" {
		t.Errorf("formatAge 50h = %q", got)
	}
	if got := formatAge(time.Now().Add(time.Minute), time.Now()); got != "0s" {
		t.Errorf("formatAge in the future = %q", got)
	}
}
