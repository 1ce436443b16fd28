package cluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gatewaywire"
	"github.com/stickyd/stickyd/internal/raftnode"
)

// direct is a Server whose log is the maps themselves: every entry is
// applied at once, in order.
type direct struct {
	name string
	maps *fsm.FSM
	mu   *sync.Mutex // shared by the servers of one log
	idx  *uint64
	fail bool // refuse every entry
}

func (d *direct) Name() string                 { return d.name }
func (d *direct) Raft() *raftnode.Node         { return nil }
func (d *direct) AdminOf(_, _ string) string   { return "" }
func (d *direct) RefreshPeers(context.Context) {}
func (d *direct) Fetch(context.Context, string, string, string, []byte) ([]byte, error) {
	return nil, errors.New("no peers")
}
func (d *direct) AdminRequest(context.Context, string, string, string, io.Reader) (*http.Request, error) {
	return nil, errors.New("no peers")
}
func (d *direct) StreamClient() *http.Client { return nil }

func (d *direct) Apply(_ context.Context, entry []byte) (any, error) {
	if d.fail {
		return nil, errors.New("no quorum")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	*d.idx++
	res := d.maps.Apply(&raft.Log{Index: *d.idx, Data: entry})
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

// ledgerOn starts a ledger of server name on maps (sharing the log of
// the others made with the same mu and idx).
func ledgerOn(t *testing.T, name string, maps *fsm.FSM, mu *sync.Mutex, idx *uint64) (*raftLedger, *direct) {
	t.Helper()
	return ledgerWith(t, name, maps, mu, idx, ceilSlack)
}

// ledgerWith is ledgerOn with the ceilings' slack.
func ledgerWith(t *testing.T, name string, maps *fsm.FSM, mu *sync.Mutex, idx *uint64, slack time.Duration) (*raftLedger, *direct) {
	t.Helper()
	srv := &direct{name: name, maps: maps, mu: mu, idx: idx}
	l := newRaftLedger(srv, maps, hclog.NewNullLogger())
	l.slack = slack
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); l.run(stop) }()
	go func() { defer wg.Done(); l.runReservations(stop) }()
	go func() { defer wg.Done(); l.runCeilings(stop) }()
	t.Cleanup(func() { close(stop); wg.Wait() })
	return l, srv
}

// Reservations in the log: the leader's ledger refuses what does not fit
// with everything held counted; a new leader counts the old one's
// reservations until their charges settle them (never twice) or they
// expire; a server's new process drops its old process's reservations.
func TestRaftLedgerReservations(t *testing.T) {
	maps := fsm.New()
	// A cluster whose servers do not all apply ceilings yet.
	maps.SetEntryGate(func(t fsm.MessageType) bool { return t != fsm.GatewayCeilingsRequestType })
	var mu sync.Mutex
	var idx uint64
	ctx := context.Background()
	budget := []gateway.Budget{{Scope: gatewaywire.Scope{Kind: gatewaywire.ScopeKey, Name: "k"}, Limit: 100, Label: `API key "k"`}}
	resv := func(id string, micros int64) gateway.Reservation {
		return gateway.Reservation{ID: id, Session: "k", Key: "k", Day: "2026-12-06", Micros: micros, Expires: time.Now().Add(time.Minute)}
	}
	old, _ := ledgerOn(t, "s1", maps, &mu, &idx)
	if err := old.Reserve(ctx, resv("r1", 60), budget); err != nil {
		t.Fatal(err)
	}
	if rs := maps.GatewayReservations(); len(rs) != 1 || rs[0].ID != "r1" || rs[0].Ledger != old.id {
		t.Fatalf("the log holds %+v once Reserve returned", rs)
	}
	if err := old.Reserve(ctx, resv("r2", 50), budget); !errors.Is(err, gateway.ErrBudget) || !strings.Contains(err.Error(), "$0.000060 held") {
		t.Fatalf("60 held of 100, 50 more: %v", err)
	}
	// A new leader (another server) still runs into r1.
	leader, _ := ledgerOn(t, "s2", maps, &mu, &idx)
	if err := leader.Reserve(ctx, resv("r3", 50), budget); !errors.Is(err, gateway.ErrBudget) {
		t.Fatalf("the new leader does not count the old one's reservation: %v", err)
	}
	if err := leader.Reserve(ctx, resv("r3", 40), budget); err != nil {
		t.Fatal(err)
	}
	// The old leader's call ends: its charge settles r1.
	if err := old.Add(ctx, gateway.Charge{Request: "c1", Session: "k", Key: "k", Day: "2026-12-06", Micros: 30, Reservation: "r1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(maps.GatewayReservations()) == 1 })
	if c := maps.GatewayCounters(); c.Keys["k"].Micros != 30 {
		t.Fatalf("counters %+v", c.Keys)
	}
	// 30 spent, 40 held: 30 more fit, 31 do not.
	if err := leader.Reserve(ctx, resv("r4", 31), budget); !errors.Is(err, gateway.ErrBudget) {
		t.Fatalf("31 more: %v", err)
	}
	if err := leader.Reserve(ctx, resv("r4", 30), budget); err != nil {
		t.Fatalf("30 more: %v", err)
	}
	leader.Release("r4")
	waitFor(t, func() bool { return len(maps.GatewayReservations()) == 1 })
	// s2 restarts while r3 is held: its new process drops r3 with its
	// first reservation.
	again, _ := ledgerOn(t, "s2", maps, &mu, &idx)
	if err := again.Reserve(ctx, resv("r5", 70), budget); err != nil {
		t.Fatalf("after s2's restart, 70 with 30 spent: %v", err)
	}
	if rs := maps.GatewayReservations(); len(rs) != 1 || rs[0].ID != "r5" {
		t.Fatalf("after s2's restart the log holds %+v", rs)
	}
	if err := again.Check(budget); !errors.Is(err, gateway.ErrBudget) {
		t.Fatalf("100 spent and held: %v", err)
	}
	// Another server's reservation past its expiry holds nothing (its
	// call could not run past it).
	short := resv("r6", 1)
	short.Key, short.Expires = "other", time.Now().Add(100*time.Millisecond)
	other := []gateway.Budget{{Scope: gatewaywire.Scope{Kind: gatewaywire.ScopeKey, Name: "other"}, Limit: 1, Label: "other"}}
	if err := old.Reserve(ctx, short, other); err != nil {
		t.Fatal(err)
	}
	if err := again.Check(other); !errors.Is(err, gateway.ErrBudget) {
		t.Fatalf("held by s1: %v", err)
	}
	time.Sleep(150 * time.Millisecond)
	if err := again.Check(other); err != nil {
		t.Fatalf("s1's reservation expired: %v", err)
	}
}

// A reservation the log does not take is refused and released: the call
// never starts.
func TestReservationNotRecorded(t *testing.T) {
	maps := fsm.New()
	var mu sync.Mutex
	var idx uint64
	l, srv := ledgerOn(t, "s1", maps, &mu, &idx)
	srv.fail = true
	budget := []gateway.Budget{{Scope: gatewaywire.Scope{Kind: gatewaywire.ScopeSession, Name: "s"}, Limit: 100, Label: `session "s"`}}
	err := l.Reserve(context.Background(), gateway.Reservation{ID: "r", Session: "s", Micros: 10, Expires: time.Now().Add(time.Minute)}, budget)
	if !errors.Is(err, gateway.ErrNotLeader) {
		t.Fatalf("a reservation raft did not take: %v", err)
	}
	l.mu.Lock()
	n := len(l.held)
	l.mu.Unlock()
	if n != 0 {
		t.Fatal("the refused reservation is still held")
	}
}

// Keys: a created key is random, prefixed and held as its SHA-256; the
// static keys and the created ones both authenticate; with none of
// either, the gateway is open; a revoked key is refused at once.
func TestKeysAuthenticate(t *testing.T) {
	a, b := newSecret(), newSecret()
	if a == b || !strings.HasPrefix(a, keyPrefix) || len(a) != len(keyPrefix)+43 {
		t.Fatalf("secrets %q, %q", a, b)
	}
	if h := hashKey("abc"); h != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("hash %s", h)
	}
	maps := fsm.New()
	var mu sync.Mutex
	var idx uint64
	srv := &direct{name: "s1", maps: maps, mu: &mu, idx: &idx}
	open := newAuthenticator(nil, maps, nil)
	if n, err := open.name(t.Context(), ""); n != "" || err != nil {
		t.Fatalf("without keys: %q %v", n, err)
	}
	apply := func(req fsm.GatewayAccessRequest) {
		t.Helper()
		entry, _ := fsm.Encode(fsm.GatewayAccessRequestType, req)
		if _, err := srv.Apply(context.Background(), entry); err != nil {
			t.Fatal(err)
		}
	}
	apply(fsm.GatewayAccessRequest{Op: fsm.AccessOpKeyCreate, Key: &gatewaywire.APIKey{Name: "ci", Hash: hashKey(a), Hint: a[len(a)-4:]}})
	auth := newAuthenticator(map[string]string{"billing": "key-billing"}, maps, nil)
	for _, tt := range []struct {
		header, name string
		err          error
	}{
		{"Bearer key-billing", "billing", nil},
		{"Bearer " + a, "ci", nil},
		{"Bearer " + b, "", errKeyUnknown},
		{"", "", errKeyRequired},
		{"Basic xyz", "", errKeyRequired},
	} {
		if n, err := auth.name(t.Context(), tt.header); n != tt.name || !errors.Is(err, tt.err) {
			t.Errorf("%q: %q %v, want %q %v", tt.header, n, err, tt.name, tt.err)
		}
	}
	if _, err := open.name(t.Context(), ""); !errors.Is(err, errKeyRequired) {
		t.Fatalf("a created key closes an open gateway: %v", err)
	}
	for _, k := range maps.GatewayAPIKeys() {
		if strings.Contains(k.Hash+k.Hint+k.Name, a[len(keyPrefix):len(a)-4]) {
			t.Fatal("the maps hold the key itself")
		}
	}
	apply(fsm.GatewayAccessRequest{Op: fsm.AccessOpKeyRevoke, Name: "ci"})
	if _, err := auth.name(t.Context(), "Bearer "+a); !errors.Is(err, errKeyUnknown) {
		t.Fatalf("a revoked key: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
