package host

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// startPool runs a pool of n workers of group whose ids start with prefix.
func startPool(t *testing.T, group, prefix string, n int, l Launcher) *Pool {
	t.Helper()
	p := New(nil, []GroupSpec{{Name: group, Prefix: prefix, Workers: n, Launcher: l}})
	t.Cleanup(func() { _ = p.Close() })
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return p
}

// The router knows this agent's workers from its pool and the others'
// from the maps (but a draining agent's); a package is delivered to the
// admin API of a remote worker's agent, never to this one's.
func TestRouterReadyGroupDeliver(t *testing.T) {
	l := newMemLog()
	pool := startPool(t, "web", "a1.", 1, &fakeLauncher{version: protocol.Version})
	l.apply(t, fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: "a1", AdminAddr: "a1:9", Workers: map[string]string{"a1.web-1": "web"}})
	l.apply(t, fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: "a2", AdminAddr: "a2:9", Workers: map[string]string{"a2.api-1": "api"}})
	l.apply(t, fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: "a3", AdminAddr: "a3:9", Workers: map[string]string{"a3.api-1": "api"}, Draining: true})
	var puts []string
	r := NewRouter(RouterConfig{Name: "a1", Pool: pool, Maps: l.f,
		Fetch: func(ctx context.Context, method, addr, path string, body []byte) ([]byte, error) {
			puts = append(puts, method+" "+addr+path+" "+string(body))
			return nil, nil
		}})
	defer r.Close()

	ready := r.Ready()
	slices.Sort(ready)
	if !slices.Equal(ready, []string{"a1.web-1", "a2.api-1"}) {
		t.Fatalf("ready %v", ready)
	}
	if got := r.Local(); !slices.Equal(got, []string{"a1.web-1"}) {
		t.Fatalf("local %v", got)
	}
	if r.GroupOf("a1.web-1") != "web" || r.GroupOf("a2.api-1") != "api" || r.GroupOf("nope") != "" {
		t.Fatalf("groups %q %q %q", r.GroupOf("a1.web-1"), r.GroupOf("a2.api-1"), r.GroupOf("nope"))
	}
	for _, w := range []string{"a1.web-1", "a2.api-1", "nope"} {
		if err := r.Deliver(t.Context(), w, "sha256:aa", []byte("pkg")); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(puts, []string{"PUT a2:9/v1/internal/park/sha256:aa pkg"}) {
		t.Fatalf("delivered %q", puts)
	}
	if _, err := r.Send(t.Context(), "nope", &protocol.Frame{}); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("a frame for a worker nobody runs: %v", err)
	}
}

// A worker of another agent is reached over a peer link that agent serves;
// a worker it does not run is answered as not found.
func TestRouterOverPeerLink(t *testing.T) {
	l := newMemLog()
	tl := &tableLauncher{changes: make(chan string, 1)}
	far := startPool(t, "api", "a2.", 1, tl)
	links, err := ServeLinks(LinkServerConfig{Addr: "127.0.0.1:0", Pool: far})
	if err != nil {
		t.Fatal(err)
	}
	defer links.Stop()
	l.apply(t, fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: "a2", RPCAddr: links.Addr(),
		Workers: map[string]string{"a2.api-1": "api", "a2.api-9": "api"}})
	near := startPool(t, "web", "a1.", 1, &fakeLauncher{version: protocol.Version})
	r := NewRouter(RouterConfig{Name: "a1", Pool: near, Maps: l.f})
	defer r.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	change := &protocol.Envelope{Body: &protocol.Envelope_TableChange{TableChange: &protocol.TableChange{Table: "t", Data: []byte("1"), Origin: "a1.web-1"}}}
	if _, err := r.call(ctx, "a2.api-1", change); err != nil {
		t.Fatal(err)
	}
	if got := <-tl.changes; got != "a2.api-1 t 1 from a1.web-1" {
		t.Fatalf("the far worker got %q", got)
	}
	if err := r.Thaw(ctx, "a2.api-9", "ana", 1); err == nil {
		t.Fatal("a worker the far agent does not run answered")
	}
}
