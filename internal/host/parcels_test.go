package host

import (
	"context"
	"errors"
	"testing"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/park"
)

// A package this agent does not hold is fetched from the agent that does,
// checked and held here; one that another agent answers with other bytes
// is corrupt; one nobody holds is not found.
func TestClusterParcels(t *testing.T) {
	l := newMemLog()
	l.apply(t, fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: "a1", AdminAddr: "a1:9"})
	l.apply(t, fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: "a2", AdminAddr: "a2:9"})
	local, far := park.NewMemStore(), map[string][]byte{}
	mine, err := local.Put([]byte("mine"), false)
	if err != nil {
		t.Fatal(err)
	}
	theirs := park.Digest([]byte("theirs"))
	far[theirs] = []byte("theirs")
	bad := park.Digest([]byte("good"))
	far[bad] = []byte("bad")
	var asked []string
	c := NewClusterParcels(ClusterParcelsConfig{Name: "a1", Store: local, Maps: l.f,
		Fetch: func(ctx context.Context, method, addr, path string, body []byte) ([]byte, error) {
			asked = append(asked, addr)
			if addr != "a2:9" {
				t.Errorf("asked %s", addr)
			}
			for d, b := range far {
				if path == "/v1/internal/park/"+d {
					return b, nil
				}
			}
			return nil, errors.New("404")
		},
		Hold: func(b []byte) (string, error) { return local.Put(b, false) }})

	if b, err := c.Get(mine); err != nil || string(b) != "mine" || len(asked) != 0 {
		t.Fatalf("a package held here: %q %v (asked %v)", b, err, asked)
	}
	if b, err := c.Get(theirs); err != nil || string(b) != "theirs" {
		t.Fatalf("a package held there: %q %v", b, err)
	}
	if b, err := local.Get(theirs); err != nil || string(b) != "theirs" {
		t.Fatalf("a fetched package is not held here: %q %v", b, err)
	}
	if _, err := c.Get(bad); !errors.Is(err, park.ErrCorrupt) {
		t.Fatalf("other bytes: %v", err)
	}
	if _, err := c.Get(park.Digest([]byte("nobody's"))); !errors.Is(err, park.ErrNotFound) {
		t.Fatalf("a package nobody holds: %v", err)
	}
}
