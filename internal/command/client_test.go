package command

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/monitor"
)

// clientCommands are the admin API commands, with arguments that would
// make each call the API once.
var clientCommands = [][]string{
	{"user", "list"},
	{"user", "show", "alice"},
	{"user", "move", "alice", "-to", "web-2"},
	{"worker", "list"},
	{"worker", "drain", "web-1"},
}

func TestClientCommandsReportAPIErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"401", 401, `{"error":"missing admin token: set STICKYD_TOKEN or pass -token"}`, "missing admin token: set STICKYD_TOKEN or pass -token"},
		{"404", 404, `{"error":"no user \"alice\""}`, `no user "alice"`},
		{"409", 409, `{"error":"move rolled back: the person stays home"}`, "move rolled back: the person stays home"},
		{"not JSON", 502, "<html>bad gateway</html>\nmore", "the admin API answered 502 Bad Gateway: <html>bad gateway</html>"},
	}
	for _, tt := range tests {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tt.status)
			_, _ = w.Write([]byte(tt.body))
		}))
		t.Cleanup(srv.Close)
		for _, args := range clientCommands {
			t.Run(tt.name+"/"+strings.Join(args, " "), func(t *testing.T) {
				r := run(t, append(args, "-address", srv.URL, "-token", testToken)...)
				r.expect(t, 1, nil, []string{tt.want})
				if r.stdout != "" {
					t.Fatalf("stdout %q on an error", r.stdout)
				}
			})
		}
	}
}

func TestClientCommandsWrongToken(t *testing.T) {
	f := newFakeAPI(t, nil)
	for _, args := range clientCommands {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			run(t, append(args, "-address", f.URL, "-token", "guess")...).expect(t, 1, nil, []string{"wrong admin token"})
		})
	}
	calls := f.Calls()
	if len(calls) != len(clientCommands) {
		t.Fatalf("%d calls, want %d", len(calls), len(clientCommands))
	}
	for _, c := range calls {
		if c.Token != "guess" {
			t.Fatalf("sent token %q, want the one given", c.Token)
		}
	}
}

func TestClientCommandsNeedATokenAndAnAgent(t *testing.T) {
	f := newFakeAPI(t, nil)
	dead := deadAddress(t)
	for _, args := range clientCommands {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			run(t, append(args, "-address", f.URL)...).
				expect(t, 1, nil, []string{"no admin token: set STICKYD_TOKEN or pass -token"})
			run(t, append(args, "-address", dead, "-token", testToken)...).
				expect(t, 1, nil, []string{"cannot reach the stickyd admin API at " + dead + ": ", "connection refused"})
			run(t, append(args, "-address", "ftp://x", "-token", testToken)...).
				expect(t, 1, nil, []string{`bad -address "ftp://x"`})
		})
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("a command without a token called the API: %+v", calls)
	}
}

// TestClientEnvironment checks the defaults of -address and -token: an
// address without a scheme is taken as http.
func TestClientEnvironment(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/users": answer(200, monitor.Page{Users: testUsers})})
	t.Setenv("STICKYD_ADDR", strings.TrimPrefix(f.URL, "http://"))
	t.Setenv("STICKYD_TOKEN", testToken)
	ui := newUI()
	if code := RunWith([]string{"user", "list"}, ui, nil); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if c := f.only(t); c.Path != "/v1/users" {
		t.Fatalf("path %q", c.Path)
	}
	// Flags beat the environment.
	ui = newUI()
	if code := RunWith([]string{"user", "list", "-token", "other"}, ui, nil); code != 1 || !strings.Contains(ui.ErrorWriter.String(), "wrong admin token") {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
}

// TestClientAddress checks that an address without a scheme is taken as
// http; the client's own tests check its timeouts.
func TestClientAddress(t *testing.T) {
	c, err := (&apiOptions{address: "127.0.0.1:4650", token: "t"}).client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Address() != DefaultAddress {
		t.Fatalf("address %s", c.Address())
	}
}

func TestHelp(t *testing.T) {
	for _, args := range clientCommands {
		name := strings.Join(args[:2], " ")
		t.Run(name, func(t *testing.T) {
			run(t, args[0], args[1], "-help").expect(t, 0, []string{"Usage: stickyd " + name, "-address=ADDR", "-token=TOKEN", "$STICKYD_TOKEN"}, nil)
		})
	}
	for _, parent := range []struct {
		name string
		subs []string
	}{
		{"user", []string{"list", "show", "move"}},
		{"worker", []string{"list", "drain"}},
	} {
		t.Run(parent.name, func(t *testing.T) {
			want := append([]string{"Usage: stickyd " + parent.name + " <subcommand>", "Subcommands:"}, parent.subs...)
			run(t, parent.name).expect(t, 1, nil, want)
			run(t, parent.name, "-help").expect(t, 0, want, nil)
		})
	}
	run(t, "-help").expect(t, 0, []string{"user", "Look at, move and forget users", "worker", "Look at and drain workers"}, nil)
}

func TestInterspersed(t *testing.T) {
	tests := []struct {
		args []string
		pos  []string
		to   string
		json bool
	}{
		{[]string{"alice"}, []string{"alice"}, "", false},
		{[]string{"-to", "w", "alice"}, []string{"alice"}, "w", false},
		{[]string{"alice", "-to", "w", "-json"}, []string{"alice"}, "w", true},
		{[]string{"alice", "bob", "-json"}, []string{"alice", "bob"}, "", true},
		{[]string{"-json", "--", "-alice", "-to"}, []string{"-alice", "-to"}, "", true},
		{[]string{"alice", "--", "-json"}, []string{"alice", "-json"}, "", false},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		to := fs.String("to", "", "")
		asJSON := fs.Bool("json", false, "")
		pos, err := interspersed(fs, tt.args)
		if err != nil || !reflect.DeepEqual(pos, tt.pos) || *to != tt.to || *asJSON != tt.json {
			t.Errorf("%q: pos %q to %q json %v err %v; want %q %q %v", tt.args, pos, *to, *asJSON, err, tt.pos, tt.to, tt.json)
		}
	}
}

func TestFormat(t *testing.T) {
	bytes := map[int]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 12 * 1024: "12 KiB",
		12*1024 + 700: "13 KiB", 5 << 20: "5 MiB", 3<<30 + 1<<29: "3.5 GiB", 5000 << 30: "5000 GiB"}
	for n, want := range bytes {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	durations := map[time.Duration]string{0: "0 µs", 850 * time.Microsecond: "850 µs", 3 * time.Millisecond: "3 ms",
		3240 * time.Microsecond: "3.2 ms", 120 * time.Millisecond: "120 ms", 1250 * time.Millisecond: "1.25 s",
		90 * time.Second: "1m30s"}
	for d, want := range durations {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// consul:// with no Consul reachable is a clear error naming the service
// and the Consul asked, before any call to stickyd.
func TestConsulAddressUnreachable(t *testing.T) {
	t.Setenv("CONSUL_HTTP_ADDR", "127.0.0.1:1")
	_, err := (&apiOptions{address: "consul://", token: "t"}).client()
	if err == nil || !strings.Contains(err.Error(), "consul://stickyd-server") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("error %v", err)
	}
}
