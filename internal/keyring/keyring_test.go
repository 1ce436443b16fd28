package keyring

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
)

// A leader seeds the ring when there is none and installs files that keep
// the ring's first key; a front with files signs with the ring's first key
// and verifies with both, and refuses files sharing no key with it.
func TestRingRules(t *testing.T) {
	k := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	if req := ringToInstall(nil, nil, ""); req == nil || len(req.Keys) != 1 || len(req.Keys[0]) != 32 || req.Source != fsm.RingGenerated || req.Expect != "" {
		t.Fatalf("seed with nothing: %+v", req)
	}
	if req := ringToInstall(nil, [][]byte{k(1)}, fromLegacy); req == nil || !bytes.Equal(req.Keys[0], k(1)) || req.Source != fsm.RingGenerated {
		t.Fatalf("seed from an older version's key: %+v", req)
	}
	if req := ringToInstall(nil, [][]byte{k(1), k(2)}, fromFiles); req == nil || fsm.RingID(req.Keys) != fsm.RingID([][]byte{k(1), k(2)}) || req.Source != fsm.RingFiles {
		t.Fatalf("seed from files: %+v", req)
	}
	ring := &fsm.CookieRing{Keys: [][]byte{k(1)}, Source: fsm.RingFiles}
	if req := ringToInstall(ring, [][]byte{k(2), k(1)}, fromFiles); req == nil || req.Expect != fsm.RingID(ring.Keys) || !bytes.Equal(req.Keys[0], k(2)) {
		t.Fatalf("rotated files: %+v", req)
	}
	for _, mine := range [][][]byte{{k(1)}, {k(3)}, nil} {
		if req := ringToInstall(ring, mine, fromFiles); req != nil {
			t.Fatalf("files %s installed over %s", fsm.RingID(mine), fsm.RingID(ring.Keys))
		}
	}
	if req := ringToInstall(ring, [][]byte{k(2)}, fromLegacy); req != nil {
		t.Fatal("a legacy key replaced the cluster's ring")
	}
	keys, differs, err := ringInForce(ring, [][]byte{k(2), k(1)}, fromFiles)
	if err != nil || !differs || len(keys) != 2 || !bytes.Equal(keys[0], k(1)) || !bytes.Equal(keys[1], k(2)) {
		t.Fatalf("files ahead of the ring: %s %v %v", fsm.RingID(keys), differs, err)
	}
	if keys, differs, err := ringInForce(ring, [][]byte{k(1)}, fromFiles); err != nil || differs || fsm.RingID(keys) != fsm.RingID(ring.Keys) {
		t.Fatalf("files that are the ring: %s %v %v", fsm.RingID(keys), differs, err)
	}
	if _, _, err := ringInForce(ring, [][]byte{k(3)}, fromFiles); err == nil || !strings.Contains(err.Error(), "share no key") {
		t.Fatalf("a damaged key file: %v", err)
	}
	if keys, differs, err := ringInForce(ring, [][]byte{k(3)}, fromLegacy); err != nil || differs || fsm.RingID(keys) != fsm.RingID(ring.Keys) {
		t.Fatal("a legacy key is not the ring")
	}
}

// memMaps is the maps' ring in memory, and the log that writes it (as a
// leader's raft would, through the FSM's rule).
type memMaps struct {
	mu      sync.Mutex // guards ring, changed, index
	ring    *fsm.CookieRing
	changed chan struct{}
	index   uint64
	leader  bool
}

var (
	_ Maps   = (*memMaps)(nil)
	_ Log    = (*memMaps)(nil)
	_ Leader = (*memMaps)(nil)
)

func newMemMaps() *memMaps { return &memMaps{changed: make(chan struct{})} }

func (m *memMaps) CookieRing() *fsm.CookieRing {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ring
}

func (m *memMaps) WatchCookieRing() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *memMaps) IsLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leader
}

func (m *memMaps) Apply(_ context.Context, entry []byte) (any, error) {
	var req fsm.CookieRingRequest
	if len(entry) == 0 || fsm.MessageType(entry[0]) != fsm.CookieRingRequestType {
		return nil, errors.New("not a ring entry")
	}
	if err := json.Unmarshal(entry[1:], &req); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id := ""
	if m.ring != nil {
		id = fsm.RingID(m.ring.Keys)
	}
	if req.Expect != id {
		return nil, fsm.ErrRingChanged
	}
	m.index++
	m.ring = &fsm.CookieRing{Keys: req.Keys, Source: req.Source, Index: m.index}
	close(m.changed)
	m.changed = make(chan struct{})
	return nil, nil
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A leader settles by seeding the ring from its files; the watch hands
// the front each change and refuses one sharing no key with the files.
func TestSettleSeedWatch(t *testing.T) {
	k := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	maps := newMemMaps()
	maps.leader = true
	reg := prometheus.NewRegistry()
	kp := New(Config{Mine: Configured{keys: [][]byte{k(1)}, source: fromFiles}, Maps: maps, Log: maps, Leader: maps,
		Registry: reg, Logger: hclog.New(&hclog.LoggerOptions{Output: testWriter{t}})})
	keys, err := kp.Settle(context.Background())
	if err != nil || fsm.RingID(keys) != fsm.RingID([][]byte{k(1)}) {
		t.Fatalf("settled on %s: %v", fsm.RingID(keys), err)
	}
	if r := maps.CookieRing(); r == nil || r.Source != fsm.RingFiles {
		t.Fatalf("the leader did not seed the ring from its files: %+v", r)
	}

	var mu sync.Mutex
	var got []string
	set := func(keys [][]byte) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fsm.RingID(keys))
		return nil
	}
	seen := func(n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= n }
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); kp.Watch(stop, set) }()
	defer func() { close(stop); <-done }()
	waitFor(t, "the first ring", seen(1))

	// Files rotated elsewhere: the ring keeps k(1) behind k(2).
	entry, _ := fsm.Encode(fsm.CookieRingRequestType, fsm.CookieRingRequest{Keys: [][]byte{k(2), k(1)}, Source: fsm.RingFiles, Expect: fsm.RingID([][]byte{k(1)})})
	if _, err := maps.Apply(context.Background(), entry); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rotated ring", seen(2))
	mu.Lock()
	if got[1] != fsm.RingID([][]byte{k(2), k(1)}) {
		t.Fatalf("the front was handed %s", got[1])
	}
	mu.Unlock()
	// A ring sharing no key with this server's files is refused.
	entry, _ = fsm.Encode(fsm.CookieRingRequestType, fsm.CookieRingRequest{Keys: [][]byte{k(3)}, Source: fsm.RingGenerated, Expect: fsm.RingID([][]byte{k(2), k(1)})})
	if _, err := maps.Apply(context.Background(), entry); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refusal", func() bool { return testutil.ToFloat64(kp.refused) == 1 })
	if n := testutil.ToFloat64(kp.keys); n != 2 {
		t.Fatalf("the front's ring holds %v keys, want the 2 it had", n)
	}
}

// The operator's routes: the list shows key ids only; a rotation on the
// leader puts a new key first, keeps the earlier ones (or drops them), and
// a follower forwards it.
func TestRoutes(t *testing.T) {
	k := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	maps := newMemMaps()
	forwarded := 0
	kp := New(Config{Maps: maps, Log: maps, Leader: maps,
		Forward: func(w http.ResponseWriter, r *http.Request, body []byte) error {
			forwarded++
			writeJSONOK(w, Ring{})
			return nil
		}})
	mux := http.NewServeMux()
	kp.Routes(mux, func(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				var ae *api.Error
				if !errors.As(err, &ae) {
					ae = &api.Error{Status: http.StatusInternalServerError, Message: err.Error()}
				}
				http.Error(w, ae.Message, ae.Status)
			}
		}
	})
	call := func(method, path, body string) (int, Ring) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		var out Ring
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
		}
		return rec.Code, out
	}
	if code, _ := call("GET", "/v1/operator/keyring", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("no ring yet: %d", code)
	}
	if code, _ := call("POST", "/v1/operator/keyring/rotate", ""); code != http.StatusOK || forwarded != 1 {
		t.Fatalf("a follower's rotation: %d, forwarded %d", code, forwarded)
	}
	maps.leader = true
	entry, _ := fsm.Encode(fsm.CookieRingRequestType, fsm.CookieRingRequest{Keys: [][]byte{k(1)}, Source: fsm.RingGenerated})
	if _, err := maps.Apply(context.Background(), entry); err != nil {
		t.Fatal(err)
	}
	code, ring := call("GET", "/v1/operator/keyring", "")
	if code != http.StatusOK || len(ring.Keys) != 1 || ring.Keys[0].ID != fsm.KeyID(k(1)) || !ring.Keys[0].Signs || ring.Source != fsm.RingGenerated {
		t.Fatalf("list: %d %+v", code, ring)
	}
	if code, _ := call("POST", "/v1/operator/keyring/rotate", "{"); code != http.StatusBadRequest {
		t.Fatalf("a bad body: %d", code)
	}
	for i := 0; i < keepOnRotate; i++ {
		if code, _ := call("POST", "/v1/operator/keyring/rotate", ""); code != http.StatusOK {
			t.Fatalf("rotation %d: %d", i, code)
		}
	}
	if r := maps.CookieRing(); len(r.Keys) != 1+keepOnRotate || !bytes.Equal(r.Keys[keepOnRotate], k(1)) {
		t.Fatalf("after %d rotations the ring holds %d keys", keepOnRotate, len(r.Keys))
	}
	// One more: the oldest key goes.
	if code, _ := call("POST", "/v1/operator/keyring/rotate", ""); code != http.StatusOK {
		t.Fatalf("rotation: %d", code)
	}
	if r := maps.CookieRing(); len(r.Keys) != 1+keepOnRotate || holds(r.Keys, k(1)) {
		t.Fatalf("the oldest key stayed: %s", fsm.RingID(r.Keys))
	}
	code, ring = call("POST", "/v1/operator/keyring/rotate", `{"drop_old": true}`)
	if code != http.StatusOK || len(ring.Keys) != 1 || len(maps.CookieRing().Keys) != 1 || ring.Keys[0].ID != fsm.KeyID(maps.CookieRing().Keys[0]) {
		t.Fatalf("drop_old: %d %+v", code, ring)
	}
	entry, _ = fsm.Encode(fsm.CookieRingRequestType, fsm.CookieRingRequest{Keys: [][]byte{k(2)}, Source: fsm.RingFiles, Expect: fsm.RingID(maps.CookieRing().Keys)})
	if _, err := maps.Apply(context.Background(), entry); err != nil {
		t.Fatal(err)
	}
	if code, _ := call("POST", "/v1/operator/keyring/rotate", ""); code != http.StatusConflict {
		t.Fatalf("rotating a ring from files: %d", code)
	}
}

// testWriter sends a logger's lines to t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
