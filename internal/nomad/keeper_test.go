package nomad

import (
	"github.com/stickyd/stickyd/internal/api/client"
	"github.com/stickyd/stickyd/internal/server"

	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/testagents"
)

// fakeMaps is a catalog a test changes.
type fakeMaps struct {
	mu      sync.Mutex
	cat     fsm.Catalog
	changed chan struct{}
	torn    bool
}

func newFakeMaps() *fakeMaps {
	return &fakeMaps{cat: fsm.Catalog{Groups: map[string]*fsm.GroupEntry{}}, changed: make(chan struct{})}
}

func (m *fakeMaps) Catalog() fsm.Catalog {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cat
}

func (m *fakeMaps) WatchCatalog() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *fakeMaps) TornDown() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Time{}, m.torn
}

// set replaces the catalog's groups and wakes the watchers.
func (m *fakeMaps) set(groups ...*fsm.GroupEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cat = fsm.Catalog{Groups: map[string]*fsm.GroupEntry{}}
	for _, g := range groups {
		m.cat.Groups[g.Name] = g
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

var _ Maps = (*fakeMaps)(nil)

// fakeLog is a raft log that records what it is given.
type fakeLog struct {
	mu      sync.Mutex
	leader  bool
	fail    error
	entries [][]byte
}

func (l *fakeLog) Apply(_ context.Context, entry []byte) (any, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return nil, l.fail
	}
	l.entries = append(l.entries, entry)
	return nil, nil
}

func (l *fakeLog) IsLeader() bool { return l.leader }

var _ Log = (*fakeLog)(nil)

// wrap is the admin API's wrapper as far as these tests need it: an
// *api.Error becomes its status.
func wrap(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			var ae *api.Error
			if errors.As(err, &ae) {
				http.Error(w, ae.Message, ae.Status)
				return
			}
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}
}

// steps reads a tear-down's NDJSON answer.
func steps(t *testing.T, body string) []TeardownStep {
	t.Helper()
	var out []TeardownStep
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var s TeardownStep
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, s)
	}
	return out
}

// The leader records the tear-down and answers with its steps; a follower
// passes the call to the leader and copies its answer; with no leader
// known it says to retry.
func TestTeardownHandler(t *testing.T) {
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/operator/teardown" || r.Header.Get("X-Stickyd-Token") != "tok" {
			http.Error(w, "wrong call", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		_ = json.NewEncoder(w).Encode(TeardownStep{Step: "recorded", Detail: "at the leader"})
		_ = json.NewEncoder(w).Encode(TeardownStep{Step: "done", Done: true})
	}))
	defer leader.Close()
	cases := []struct {
		name       string
		log        *fakeLog
		leaderAddr string
		status     int
		want       []string // step: detail
		recorded   int
	}{
		{name: "leader", log: &fakeLog{leader: true}, status: http.StatusOK, recorded: 1,
			want: []string{"recorded: no leader registers a group job or writes the registry from now on", "done: "}},
		{name: "leader failing to record", log: &fakeLog{leader: true, fail: errors.New("no quorum")}, status: http.StatusOK,
			want: []string{"failed: recording the tear-down: no quorum"}},
		{name: "follower", log: &fakeLog{}, leaderAddr: strings.TrimPrefix(leader.URL, "http://"), status: http.StatusOK,
			want: []string{"recorded: at the leader", "done: "}},
		{name: "no leader known", log: &fakeLog{}, status: http.StatusServiceUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := New(Config{Maps: newFakeMaps(), Log: c.log, AdminToken: "tok",
				LeaderAdmin: func(context.Context) string { return c.leaderAddr },
				Remote:      server.NewRemote("tok", false, client.NewTransport(nil))})
			mux := http.NewServeMux()
			k.Routes(mux, wrap)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/operator/teardown", nil))
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			if c.status != http.StatusOK {
				return
			}
			var got []string
			for _, s := range steps(t, rec.Body.String()) {
				got = append(got, s.Step+": "+s.Detail+s.Error)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("steps %q, want %q", got, c.want)
			}
			if len(c.log.entries) != c.recorded {
				t.Fatalf("%d entries recorded, want %d", len(c.log.entries), c.recorded)
			}
			for _, e := range c.log.entries {
				if fsm.EntryType(e) != fsm.TeardownRequestType {
					t.Errorf("recorded an entry of type %d, want the tear-down", fsm.EntryType(e))
				}
			}
		})
	}
}

// Run registers a job for each catalog group with a bundle, with its
// variable, and purges the job of a group the catalog retires; it
// returns when stop closes.
func TestKeeperRun(t *testing.T) {
	testagents.Require(t, "nomad")
	consul := testagents.StartConsul(t)
	n := testagents.StartNomad(t, testagents.NomadOptions{ConsulAddr: consul.HTTPAddr})
	c := n.Client()
	m := newFakeMaps()
	m.set(&fsm.GroupEntry{Name: "web", Bundle: testBundle, Workers: 2}, &fsm.GroupEntry{Name: "builtin", Workers: 1})
	job := unplacedJob("")
	job.ConsulToken = "consul-tok"
	k := New(Config{Maps: m, Log: &fakeLog{leader: true}, API: &API{Address: n.Addr}, Job: job, AdminToken: "tok"})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		k.Run(stop)
	}()
	defer func() {
		close(stop)
		<-done
	}()
	waitFor(t, time.Minute, func() error {
		if g := listGroups(t, c); !slices.Equal(g, []string{"web"}) {
			return errors.New("jobs of groups " + strings.Join(g, ", ") + ", want web's only")
		}
		return nil
	})
	v, _, err := c.Variables().Read(SecretsPath("web"), nil)
	if err != nil || v.Items[SecretItem] != "tok" || v.Items[ConsulTokenItem] != "consul-tok" {
		t.Errorf("web's variable = %+v (%v), want both tokens", v, err)
	}
	info, _, err := c.Jobs().Info(JobID("web"), nil)
	if err != nil || info.Meta[MetaWorkers] != "2" {
		t.Errorf("web's job meta = %v (%v), want 2 workers", info, err)
	}

	m.set(&fsm.GroupEntry{Name: "builtin", Workers: 1})
	waitFor(t, time.Minute, func() error {
		if g := listGroups(t, c); len(g) != 0 {
			return errors.New("jobs of groups " + strings.Join(g, ", ") + " still there")
		}
		return nil
	})
}
