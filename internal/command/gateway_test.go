package command

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

// testCounters are a small ledger: three days, four sessions (one the
// calls that named none), two of them tied on cost.
var testCounters = gateway.Counters{
	Days: map[string]gateway.Tally{
		"2026-11-28": {Micros: 5, Calls: 1, Usage: gateway.Usage{Input: 10, Output: 2}},
		"2026-11-30": {Micros: 1_234_567, Calls: 12, Usage: gateway.Usage{Input: 1000, CachedInput: 300, CacheWrite: 200, Output: 340}},
		"2026-11-29": {Micros: 1234, Calls: 3, Usage: gateway.Usage{Input: 90, Output: 30}},
	},
	Sessions: map[string]gateway.Tally{
		"alice": {Micros: 1_000_000, Calls: 5, Usage: gateway.Usage{Input: 800, CachedInput: 300, CacheWrite: 200, Output: 200}},
		"bob":   {Micros: 1234, Calls: 4, Usage: gateway.Usage{Input: 40, Output: 10}},
		"carol": {Micros: 1234, Calls: 6, Usage: gateway.Usage{Input: 50, Output: 20}},
		"":      {Micros: 233_338, Calls: 1, Usage: gateway.Usage{Input: 210, Output: 142}},
	},
	Total: gateway.Tally{Micros: 1_235_806, Calls: 16, Usage: gateway.Usage{Input: 1100, CachedInput: 300, CacheWrite: 200, Output: 372}},
}

// usageAPI answers GET /v1/gateway/usage with c as the agent does: with
// ?session=NAME, the sessions are NAME alone (zero if it made no call).
func usageAPI(c gateway.Counters) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := c.Clone()
		if s := r.URL.Query().Get("session"); s != "" {
			c.Sessions = map[string]gateway.Tally{s: c.Sessions[s]}
		}
		writeJSON(w, 200, c)
	}
}

func TestGatewayUsage(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/gateway/usage": usageAPI(testCounters)})
	tests := []struct {
		name  string
		args  []string
		query string
		want  string
	}{
		{"defaults", nil, "", `
Total cost   = $1.235806
Total calls  = 16
Total tokens = 1300 in, 300 cached, 372 out

Days (newest first)
DAY          COST        CALLS   IN     CACHED   OUT
2026-11-30   $1.234567   12      1200   300      340
2026-11-29   $0.001234   3       90     0        30
2026-11-28   $0.000005   1       10     0        2

Sessions (costliest first)
SESSION   COST        CALLS   IN     CACHED   OUT
alice     $1.000000   5       1000   300      200
(none)    $0.233338   1       210    0        142
carol     $0.001234   6       50     0        20
bob       $0.001234   4       40     0        10`},
		{"-days", []string{"-days", "2"}, "", `
Total cost   = $1.235806
Total calls  = 16
Total tokens = 1300 in, 300 cached, 372 out

Days (newest 2 of 3)
DAY          COST        CALLS   IN     CACHED   OUT
2026-11-30   $1.234567   12      1200   300      340
2026-11-29   $0.001234   3       90     0        30

Sessions (costliest first)
SESSION   COST        CALLS   IN     CACHED   OUT
alice     $1.000000   5       1000   300      200
(none)    $0.233338   1       210    0        142
carol     $0.001234   6       50     0        20
bob       $0.001234   4       40     0        10`},
		{"-session", []string{"-session", "carol", "-days", "1"}, "session=carol", `
Total cost   = $1.235806
Total calls  = 16
Total tokens = 1300 in, 300 cached, 372 out

Days (every session, newest 1 of 3)
DAY          COST        CALLS   IN     CACHED   OUT
2026-11-30   $1.234567   12      1200   300      340

Session carol
SESSION   COST        CALLS   IN   CACHED   OUT
carol     $0.001234   6       50   0        20`},
		{"-session without calls", []string{"-session", "dave smith", "-days", "0"}, "session=dave+smith", `
Total cost   = $1.235806
Total calls  = 16
Total tokens = 1300 in, 300 cached, 372 out

Days (every session, newest first)
DAY          COST        CALLS   IN     CACHED   OUT
2026-11-30   $1.234567   12      1200   300      340
2026-11-29   $0.001234   3       90     0        30
2026-11-28   $0.000005   1       10     0        2

Session dave smith has made no calls.`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.Calls())
			r := run(t, f.args(append([]string{"gateway", "usage"}, tt.args...)...)...)
			r.expect(t, 0, nil, nil)
			if got, want := strings.TrimRight(r.stdout, "\n"), strings.TrimPrefix(tt.want, "\n"); got != want {
				t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
			}
			calls := f.Calls()[before:]
			if len(calls) != 1 || calls[0].Method != "GET" || calls[0].Path != "/v1/gateway/usage" || calls[0].Query != tt.query || calls[0].Token != testToken {
				t.Fatalf("calls %+v, want one GET /v1/gateway/usage?%s", calls, tt.query)
			}
		})
	}
}

func TestGatewayUsageLimits(t *testing.T) {
	c := gateway.Counters{Days: map[string]gateway.Tally{}, Sessions: map[string]gateway.Tally{}}
	for d := 1; d <= 9; d++ {
		c.Days[fmt.Sprintf("2026-12-%02d", d)] = gateway.Tally{Micros: int64(d), Calls: 1}
	}
	for s := 1; s <= 25; s++ {
		c.Sessions[fmt.Sprintf("s%02d", s)] = gateway.Tally{Micros: int64(s) * 1_000_000, Calls: 1}
	}
	c.Total = gateway.Tally{Micros: 325_000_045, Calls: 34}
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/gateway/usage": usageAPI(c)})

	// firstColumn returns the first field of the rows under heading.
	firstColumn := func(t *testing.T, out, heading string) []string {
		t.Helper()
		_, table, ok := strings.Cut(out, "\n"+heading+"\n")
		if !ok {
			t.Fatalf("no %q in:\n%s", heading, out)
		}
		table, _, _ = strings.Cut(table, "\n\n")
		var col []string
		for _, row := range fields(table)[1:] {
			col = append(col, row[0])
		}
		return col
	}

	r := run(t, f.args("gateway", "usage")...)
	r.expect(t, 0, []string{"Total cost   = $325.000045\n", "Total calls  = 34\n"}, nil)
	days := firstColumn(t, r.stdout, "Days (newest 7 of 9)")
	if got := strings.Join(days, " "); got != "2026-12-09 2026-12-08 2026-12-07 2026-12-06 2026-12-05 2026-12-04 2026-12-03" {
		t.Errorf("days %s", got)
	}
	sessions := firstColumn(t, r.stdout, "Sessions (top 20 of 25, costliest first)")
	if len(sessions) != 20 || sessions[0] != "s25" || sessions[19] != "s06" {
		t.Errorf("sessions %q", sessions)
	}
	if !strings.Contains(r.stdout, "s25       $25.000000   1 ") {
		t.Errorf("costs over a dollar:\n%s", r.stdout)
	}

	r = run(t, f.args("gateway", "usage", "-days=0")...)
	r.expect(t, 0, nil, nil)
	if days := firstColumn(t, r.stdout, "Days (newest first)"); len(days) != 9 || days[8] != "2026-12-01" {
		t.Errorf("-days=0: days %q", days)
	}

	empty := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/gateway/usage": usageAPI(gateway.Counters{})})
	run(t, empty.args("gateway", "usage")...).expect(t, 0, []string{"The gateway has charged no calls yet."}, nil)
	run(t, empty.args("gateway", "usage", "-session", "alice")...).expect(t, 0, []string{"The gateway has charged no calls yet."}, nil)
}

func TestGatewayUsageJSON(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/gateway/usage": usageAPI(testCounters)})
	r := run(t, f.args("gateway", "usage", "-json")...)
	r.expect(t, 0, []string{`"micros": 1235806`, `"cache_write_tokens": 200`, `"2026-11-28": {`}, nil)
	var got gateway.Counters
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("-json: %v\n%s", err, r.stdout)
	}
	if len(got.Days) != 3 || len(got.Sessions) != 4 || got.Total != testCounters.Total || got.Sessions[""] != testCounters.Sessions[""] {
		t.Fatalf("-json: %+v", got)
	}

	r = run(t, f.args("gateway", "usage", "-json", "-session", "bob")...)
	r.expect(t, 0, nil, nil)
	got = gateway.Counters{}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.Sessions) != 1 || got.Sessions["bob"] != testCounters.Sessions["bob"] {
		t.Fatalf("-json -session: %v %+v", err, got)
	}
	if c := f.Calls(); c[len(c)-1].Query != "session=bob" {
		t.Fatalf("-json -session asked %q", c[len(c)-1].Query)
	}
}

func TestGatewayHealth(t *testing.T) {
	since := time.Date(2026, 11, 30, 10, 4, 5, 0, time.UTC)
	models := map[string]gateway.ModelHealth{
		"gpt-4o": {
			Slots: gateway.SlotStats{Capacity: 8, InFlight: 3, Queued: 2, QueueMax: 1000},
			Deployments: map[string]gateway.HealthState{
				"openai":     {Degraded: true, Since: since, Reason: "consecutive timeouts", Requests: 14, Failures: 5},
				"azure-east": {Requests: 120, Failures: 2},
			},
		},
		"claude": {
			Slots:       gateway.SlotStats{Capacity: 4, QueueMax: 10},
			Deployments: map[string]gateway.HealthState{"anthropic": {Degraded: true}},
		},
		"local": {Slots: gateway.SlotStats{Capacity: 1, QueueMax: 1}, Deployments: map[string]gateway.HealthState{}},
	}
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/gateway/health": answer(200, models)})
	r := run(t, f.args("gateway", "health")...)
	r.expect(t, 0, nil, nil)
	if c := f.only(t); c.Method != "GET" || c.Path != "/v1/gateway/health" || c.Query != "" {
		t.Fatalf("called %s %s?%s", c.Method, c.Path, c.Query)
	}
	// Columns are three spaces apart or more; the health has single
	// spaces.
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var cols []string
		for _, c := range strings.Split(l, "   ") {
			if c = strings.TrimSpace(c); c != "" {
				cols = append(cols, c)
			}
		}
		got = append(got, strings.Join(cols, "|"))
	}
	want := []string{
		"Model claude: 0/4 running, 0/10 queued",
		"DEPLOYMENT|HEALTH|REQUESTS|FAILURES",
		"anthropic|degraded|0|0",
		"",
		"Model gpt-4o: 3/8 running, 2/1000 queued",
		"DEPLOYMENT|HEALTH|REQUESTS|FAILURES",
		"azure-east|ok|120|2",
		"openai|degraded since " + since.Local().Format(time.RFC3339) + " (consecutive timeouts)|14|5",
		"",
		"Model local: 0/1 running, 0/1 queued",
		"No deployments",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("stdout:\n%s\nwant (columns split by |):\n%s", r.stdout, strings.Join(want, "\n"))
	}

	r = run(t, f.args("gateway", "health", "-json")...)
	r.expect(t, 0, []string{`"queue_max": 1000`, `"reason": "consecutive timeouts"`, `"requests_in_window": 120`}, nil)
	var back map[string]gateway.ModelHealth
	if err := json.Unmarshal([]byte(r.stdout), &back); err != nil || len(back) != 3 || !back["gpt-4o"].Deployments["openai"].Since.Equal(since) {
		t.Fatalf("-json: %v %+v", err, back)
	}

	empty := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/gateway/health": answer(200, map[string]any{})})
	run(t, empty.args("gateway", "health")...).expect(t, 0, []string{"The gateway has no models."}, nil)
}

func TestGatewayAPIErrors(t *testing.T) {
	// No gateway routes: the agent has no gateway block.
	none := newFakeAPI(t, nil)
	run(t, none.args("gateway", "usage")...).expect(t, 1, nil, []string{
		"reading the gateway's usage: no API route GET /v1/gateway/usage (does the agent's configuration have a gateway block?)"})
	run(t, none.args("gateway", "health")...).expect(t, 1, nil, []string{
		"reading the gateway's health: no API route GET /v1/gateway/health (does the agent's configuration have a gateway block?)"})

	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/gateway/usage": func(w http.ResponseWriter, r *http.Request) {
			writeError(w, 500, "reading the maps: closed")
		},
		"GET /v1/gateway/health": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html>upstream down</html>"))
		},
	})
	tests := []struct {
		args []string
		err  string
	}{
		{f.args("gateway", "usage"), "reading the gateway's usage: reading the maps: closed"},
		{f.args("gateway", "health"), "reading the gateway's health: the admin API answered 502 Bad Gateway: <html>upstream down</html>"},
		{[]string{"gateway", "usage", "-address", f.URL, "-token", "wrong"}, "reading the gateway's usage: wrong admin token"},
		{[]string{"gateway", "health", "-address", deadAddress(t), "-token", testToken}, "cannot reach the stickyd admin API"},
		{[]string{"gateway", "usage", "-address", f.URL}, "no admin token"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[:2], " ")+" "+tt.err, func(t *testing.T) {
			r := run(t, tt.args...)
			r.expect(t, 1, nil, []string{tt.err})
			if r.stdout != "" {
				t.Fatalf("a failed call printed %q", r.stdout)
			}
			if strings.Contains(r.stderr, "gateway block") {
				t.Fatalf("the gateway block hint on a non-404: %s", r.stderr)
			}
		})
	}

	bad := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/gateway/usage": answer(200, []string{"not", "counters"})})
	run(t, bad.args("gateway", "usage")...).expect(t, 1, nil, []string{"reading the gateway's usage: decoding the answer"})
}

func TestGatewayUsageErrors(t *testing.T) {
	f := newFakeAPI(t, nil)
	tests := []struct {
		args []string
		err  string
	}{
		{[]string{"gateway", "usage", "-days", "-1"}, "-days=-1: want 0 (every day) or more"},
		{[]string{"gateway", "usage", "-days", "week"}, `invalid value "week" for flag -days`},
		{[]string{"gateway", "usage", "-json", "-days", "3"}, "-days shortens the table of days; -json prints every day"},
		{[]string{"gateway", "usage", "alice"}, "unexpected arguments: alice"},
		{[]string{"gateway", "usage", "-model", "x"}, "flag provided but not defined: -model"},
		{[]string{"gateway", "health", "gpt-4o"}, "unexpected arguments: gpt-4o"},
		{[]string{"gateway", "health", "-days", "1"}, "flag provided but not defined: -days"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			run(t, f.args(tt.args...)...).expect(t, 1, nil, []string{tt.err})
		})
	}
	// Last, so that it takes no -address for its value.
	run(t, "gateway", "usage", "-address", f.URL, "-token", testToken, "-session").expect(t, 1, nil, []string{"flag needs an argument: -session"})
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("usage errors called the API: %+v", calls)
	}
}

func TestGatewayHelp(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"gateway"}, []string{"Usage: stickyd gateway <subcommand>", "AI gateway", "usage", "health",
			"Show the gateway's costs per day and session", "Show the gateway's slots and deployments' health"}},
		{[]string{"gateway", "usage", "-help"}, []string{"Usage: stickyd gateway usage [options]", "-session=NAME", "-days=N", "-json", "-token=TOKEN"}},
		{[]string{"gateway", "health", "-help"}, []string{"Usage: stickyd gateway health [options]", "REQUESTS and FAILURES", "-json", "-address=ADDR"}},
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
}

func TestFormatMicros(t *testing.T) {
	for m, want := range map[int64]string{
		0:              "$0.000000",
		1:              "$0.000001",
		1234:           "$0.001234",
		1_000_000:      "$1.000000",
		12_345_678_901: "$12345.678901",
		-2_500_000:     "-$2.500000",
	} {
		if got := formatMicros(m); got != want {
			t.Errorf("formatMicros(%d) = %q, want %q", m, got, want)
		}
	}
}
