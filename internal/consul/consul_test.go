package consul

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/internal/testagents"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the Consul API client's pool.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}

// newClient returns a Client for agent with token and the default prefix.
func newClient(t *testing.T, agent *testagents.Consul, token string) *Client {
	t.Helper()
	c, err := New(Config{
		Address: agent.HTTPAddr,
		Token:   token,
		Logger:  hclog.New(&hclog.LoggerOptions{Name: t.Name(), Output: tWriter{t}, Level: hclog.Debug}),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tWriter sends log lines to t.Log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitFor polls cond until it returns true or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNew(t *testing.T) {
	cases := []struct {
		prefix, want string
	}{
		{"", "stickyd/"},
		{"apps/stickyd", "apps/stickyd/"},
		{"x/", "x/"},
	}
	for _, tc := range cases {
		t.Run(tc.prefix, func(t *testing.T) {
			c, err := New(Config{Address: "127.0.0.1:1", Prefix: tc.prefix})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Prefix(); got != tc.want {
				t.Errorf("Prefix() = %q; want %q", got, tc.want)
			}
			if got := c.Key("a"); got != tc.want+"a" {
				t.Errorf("Key(a) = %q; want %q", got, tc.want+"a")
			}
		})
	}
}

func TestServices(t *testing.T) {
	agent := testagents.StartConsul(t)
	c := newClient(t, agent, "")
	ctx := context.Background()

	regs := []*api.AgentServiceRegistration{
		{ID: "front-1", Name: "stickyd-front", Address: "10.0.0.5", Port: 80},
		{ID: "front-2", Name: "stickyd-front", Port: 8080}, // node address
		{ID: "other", Name: "other", Port: 9},
	}
	for _, r := range regs {
		if err := agent.Client().Agent().ServiceRegister(r); err != nil {
			t.Fatalf("registering %s: %v", r.ID, err)
		}
	}

	want := "10.0.0.5:80 127.0.0.1:8080"
	var got []string
	waitFor(t, 10*time.Second, "both instances in the catalog", func() bool {
		var err error
		got, err = c.Services(ctx, "stickyd-front")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, " ") == want
	})

	none, err := c.Services(ctx, "no-such-service")
	if err != nil || len(none) != 0 {
		t.Errorf("Services(no-such-service) = %v, %v; want none", none, err)
	}

	t.Run("unreachable", func(t *testing.T) {
		down, err := New(Config{Address: "127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = down.Services(ctx, "stickyd-front")
		if err == nil || !strings.Contains(err.Error(), "consul at 127.0.0.1:1") {
			t.Fatalf("error = %v; want one naming consul at 127.0.0.1:1", err)
		}
	})
}
