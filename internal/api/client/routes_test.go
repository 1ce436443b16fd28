package client_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/api/client"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/raftnode"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// The routes internal/api serves are called here through the real handler:
// each method's route, query and body must be what the server reads, and
// its answer (wrappers such as {"backends": [...]} included) what the
// client decodes. The routes the agent adds (operator, gateway) are checked
// against recorded answers in client_test.go.

const routeToken = "route-token"

// fakeServer is what the API calls, recording what it was asked.
type fakeServer struct {
	mu    sync.Mutex // guards asked
	asked []any
}

func (f *fakeServer) ask(v any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, v)
}

// last returns what the API asked last.
func (f *fakeServer) last() any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.asked) == 0 {
		return nil
	}
	return f.asked[len(f.asked)-1]
}

var alice = placement.UserInfo{User: "alice", Worker: "web-1", Epoch: 3, State: placement.StateLive, Conns: 1, Seen: 1700000000}

func (f *fakeServer) UsersPage(q fsm.UserQuery) fsm.UserPage {
	f.ask(q)
	return fsm.UserPage{Users: []placement.UserInfo{alice}, Next: "alice"}
}

func (f *fakeServer) Tally() fsm.UserTally {
	return fsm.UserTally{Users: 1, Conns: 1, State: map[string]int{"live": 1}, Workers: map[string]int{"web-1": 1}, Groups: map[string]int{"web": 1}}
}

func (f *fakeServer) User(user string) (placement.UserInfo, bool) {
	return alice, user == "alice"
}

func (f *fakeServer) Move(_ context.Context, user, to, _ string) (move.Result, error) {
	f.ask([]string{"move", user, to})
	return move.Result{User: user, From: "web-1", To: to, Outcome: move.Moved, Freeze: time.Millisecond}, nil
}

func (f *fakeServer) MoveToGroup(_ context.Context, user, group, _ string) (move.Result, error) {
	f.ask([]string{"move to group", user, group})
	return move.Result{}, supervisor.ErrNoGroup
}

func (f *fakeServer) Drain(_ context.Context, worker string, parallel int, progress func(move.Result, error)) (supervisor.DrainResult, error) {
	f.ask([]any{"drain", worker, parallel})
	progress(move.Result{User: "alice", From: worker, To: "web-2", Outcome: move.Moved}, nil)
	progress(move.Result{User: "bob", From: worker}, errors.New("bob is busy"))
	return supervisor.DrainResult{Worker: worker, Users: 2, Moved: 1, Failed: 1}, nil
}

func (f *fakeServer) ForgetUser(_ context.Context, user string) (move.Forgotten, error) {
	return move.Forgotten{User: user, Worker: "web-1", Conns: 2}, nil
}

func (f *fakeServer) PutGroup(_ context.Context, g fsm.GroupEntry) error { f.ask(g); return nil }

func (f *fakeServer) DeleteGroup(_ context.Context, group string) error {
	f.ask([]string{"retire", group})
	return nil
}

func (f *fakeServer) PutRule(_ context.Context, r fsm.Rule) error { f.ask(r); return nil }

func (f *fakeServer) DeleteRule(_ context.Context, id string) error {
	f.ask([]string{"delete rule", id})
	return nil
}

func (f *fakeServer) Promote(_ context.Context, group, from string, parallel int, progress func(move.Result, error)) (supervisor.ReconcileResult, error) {
	f.ask([]any{"promote", group, from, parallel})
	progress(move.Result{User: "alice", From: "web-1", To: "v2-1"}, nil)
	return supervisor.ReconcileResult{Users: 1, Moved: 1}, nil
}

func (f *fakeServer) Rollback(_ context.Context, parallel int, _ func(move.Result, error)) (string, supervisor.ReconcileResult, error) {
	f.ask([]any{"rollback", parallel})
	return "web", supervisor.ReconcileResult{}, nil
}

func (f *fakeServer) Misplaced(func(placement.UserInfo, string) bool) []placement.UserInfo {
	return nil
}

func (f *fakeServer) Reconcile(context.Context, []placement.UserInfo, int, string, func(move.Result, error)) (supervisor.ReconcileResult, error) {
	return supervisor.ReconcileResult{}, nil
}

func (f *fakeServer) DefaultGroup() string { return "web" }

func (f *fakeServer) Windows(context.Context) ([]monitor.Window, error) {
	return []monitor.Window{{Backend: "db-a", MaxWait: "30s", Since: time.Unix(1700000000, 0).UTC(), Source: "raft", Waiting: 2}}, nil
}

func (f *fakeServer) Start(_ context.Context, backend, reason string, maxWait time.Duration) (monitor.Window, error) {
	f.ask([]any{"start", backend, reason, maxWait})
	return monitor.Window{Backend: backend, Reason: reason, MaxWait: maxWait.String(), Source: "raft"}, nil
}

func (f *fakeServer) End(_ context.Context, backend string) (time.Duration, error) {
	if backend != "db-a" {
		return 0, &api.Error{Status: 404, Message: "backend " + backend + " is not in maintenance"}
	}
	return 5200 * time.Millisecond, nil
}

var web = fsm.GroupEntry{Name: "web", Runtime: "builtin", Builtin: "demo", Workers: 2}

func (f *fakeServer) view() api.GroupsView {
	return api.GroupsView{Default: "web", Groups: []api.GroupInfo{{GroupEntry: web, Source: "config", WorkerIDs: []string{"web-1"}, Ready: 1, Users: 1, Default: true}},
		Rules: []fsm.Rule{{ID: "maria-web", Group: "web", User: "maria"}}}
}

// realAPI serves internal/api's handler over a fakeServer.
func realAPI(t *testing.T) (*fakeServer, *client.Client) {
	t.Helper()
	f := &fakeServer{}
	srv := httptest.NewServer(api.Handler(api.Config{
		Token: routeToken, Supervisor: f,
		Workers: func(context.Context, bool) any {
			return []host.WorkerInfo{{ID: "web-1", Group: "web", State: host.StateReady, Incarnation: 1}}
		},
		Status: func() any {
			return map[string]any{"name": "a1", "leader": "a1", "members": []raftnode.Peer{{ID: "a1", Voter: true, Leader: true}}, "applied_index": 9}
		},
		Events: func() any { return []governor.Event{{Kind: governor.KindMove, User: "alice", Reason: "hot"}} },
		Monitor: func(_ context.Context, q fsm.UserQuery) (any, error) {
			f.ask(q)
			return monitor.View{Agent: "a1", Tally: f.Tally()}, nil
		},
		Groups: f, GroupsView: f.view, CheckGovernance: func([]byte) error { return nil },
		Maintenance: f,
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(client.Config{Address: srv.URL, Token: routeToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return f, c
}

func TestRoutesOfTheRealAPI(t *testing.T) {
	f, c := realAPI(t)
	ctx := context.Background()
	check := func(t *testing.T, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}

	t.Run("users", func(t *testing.T) {
		p, err := c.Users(ctx, client.UsersQuery{Worker: "web-1", Group: "web", State: "live", Cursor: monitor.EncodeCursor("ab"), Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		check(t, f.last(), fsm.UserQuery{Worker: "web-1", Group: "web", State: "live", After: "ab", Limit: 5})
		check(t, p, client.UsersPage{Users: []client.User{{User: "alice", Worker: "web-1", Epoch: 3, State: "live", Conns: 1, Seen: 1700000000}}, Next: monitor.EncodeCursor("alice")})
		if _, err := c.Users(ctx, client.UsersQuery{State: "asleep"}); !isStatus(err, 400) {
			t.Fatalf("a bad state: %v", err)
		}
	})
	t.Run("user", func(t *testing.T) {
		u, err := c.User(ctx, "alice")
		check(t, err, nil)
		check(t, u.Worker, "web-1")
		if _, err := c.User(ctx, "nobody"); !client.IsNotFound(err) || err.Error() != `no user "nobody"` {
			t.Fatalf("an unknown user: %v", err)
		}
	})
	t.Run("tally", func(t *testing.T) {
		tally, err := c.Tally(ctx)
		check(t, err, nil)
		check(t, tally.Workers["web-1"], 1)
	})
	t.Run("move", func(t *testing.T) {
		m, err := c.MoveUser(ctx, "alice", client.MoveRequest{To: "web-2"})
		check(t, err, nil)
		check(t, f.last(), []string{"move", "alice", "web-2"})
		check(t, m, client.Move{User: "alice", From: "web-1", To: "web-2", Outcome: client.MoveMoved, Freeze: time.Millisecond})
		_, err = c.MoveUser(ctx, "alice", client.MoveRequest{Group: "nogroup"})
		if !client.IsNotFound(err) {
			t.Fatalf("an unknown group: %v", err)
		}
		if _, err := c.MoveUser(ctx, "alice", client.MoveRequest{}); !isStatus(err, 400) {
			t.Fatalf("no destination: %v", err)
		}
	})
	t.Run("forget", func(t *testing.T) {
		res, err := c.ForgetUser(ctx, "alice")
		check(t, err, nil)
		check(t, res, client.Forgotten{User: "alice", Worker: "web-1", Conns: 2})
	})
	t.Run("workers", func(t *testing.T) {
		ws, err := c.Workers(ctx)
		check(t, err, nil)
		check(t, ws, []client.Worker{{ID: "web-1", Group: "web", State: client.WorkerReady, Incarnation: 1}})
	})
	t.Run("drain", func(t *testing.T) {
		s, err := c.DrainWorker(ctx, "web-1", 3)
		check(t, err, nil)
		defer s.Close()
		var lines []client.DrainProgress
		for {
			p, err := s.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			check(t, err, nil)
			lines = append(lines, p)
		}
		check(t, f.last(), []any{"drain", "web-1", 3})
		check(t, lines, []client.DrainProgress{
			{Move: &client.Move{User: "alice", From: "web-1", To: "web-2", Outcome: client.MoveMoved}},
			{Move: &client.Move{User: "bob", From: "web-1"}, Error: "bob is busy"},
			{Done: &client.DrainResult{Worker: "web-1", Users: 2, Moved: 1, Failed: 1}},
		})
	})
	t.Run("status and events", func(t *testing.T) {
		st, err := c.Status(ctx)
		check(t, err, nil)
		check(t, st, client.Status{Name: "a1", Leader: "a1", Members: []client.Peer{{ID: "a1", Voter: true, Leader: true}}, Index: 9})
		es, err := c.Events(ctx)
		check(t, err, nil)
		check(t, es, []client.Event{{Kind: "move", User: "alice", Reason: "hot"}})
	})
	t.Run("monitor", func(t *testing.T) {
		v, err := c.Monitor(ctx, 7)
		check(t, err, nil)
		check(t, f.last(), fsm.UserQuery{Limit: 7})
		check(t, v.Agent, "a1")
		check(t, v.Tally.Users, 1)
	})
	t.Run("maintenance", func(t *testing.T) {
		ws, err := c.MaintenanceWindows(ctx)
		check(t, err, nil)
		check(t, ws, []client.MaintenanceWindow{{Backend: "db-a", MaxWait: "30s", Since: time.Unix(1700000000, 0).UTC(), Source: "raft", Waiting: 2}})
		w, err := c.StartMaintenance(ctx, "db-b", client.MaintenanceRequest{Reason: "upgrade", MaxWait: "45s"})
		check(t, err, nil)
		check(t, f.last(), []any{"start", "db-b", "upgrade", 45 * time.Second})
		check(t, w.MaxWait, "45s")
		if _, err := c.StartMaintenance(ctx, "db-b", client.MaintenanceRequest{MaxWait: "soon"}); !isStatus(err, 400) {
			t.Fatalf("a bad max wait: %v", err)
		}
		e, err := c.EndMaintenance(ctx, "db-a")
		check(t, err, nil)
		check(t, e, client.MaintenanceEnded{Backend: "db-a", Ended: true, Lasted: "5.2s"})
		if _, err := c.EndMaintenance(ctx, "db-c"); !client.IsNotFound(err) || err.Error() != "backend db-c is not in maintenance" {
			t.Fatalf("a backend not in maintenance: %v", err)
		}
	})
	t.Run("groups", func(t *testing.T) {
		v, err := c.Groups(ctx)
		check(t, err, nil)
		check(t, v.Default, "web")
		check(t, v.Groups[0].GroupRecipe, client.GroupRecipe{Name: "web", Runtime: "builtin", Builtin: "demo", Workers: 2})
		check(t, v.Rules, []client.Rule{{ID: "maria-web", Group: "web", User: "maria"}})
		s, err := c.Group(ctx, "web")
		check(t, err, nil)
		check(t, s.Group.Name, "web")
		if _, err := c.Group(ctx, "nope"); !client.IsNotFound(err) {
			t.Fatalf("an unknown group: %v", err)
		}
		rules, err := c.Rules(ctx)
		check(t, err, nil)
		check(t, rules, v.Rules)
	})
	t.Run("create and retire", func(t *testing.T) {
		g, err := c.CreateGroup(ctx, "canary", client.GroupRequest{Bundle: "sha256:ab", Args: []string{"-x"}, Env: map[string]string{"K": "V"},
			Limits: &client.GroupLimits{MaxPagesPerConn: 4}, Governance: map[string]any{"enabled": true}})
		check(t, err, nil)
		want := fsm.GroupEntry{Name: "canary", Runtime: "go-plugin", Bundle: "sha256:ab", Args: []string{"-x"}, Env: map[string]string{"K": "V"},
			Workers: 1, Limits: &fsm.GroupLimits{MaxPagesPerConn: 4}, Governance: []byte(`{"enabled":true}`)}
		check(t, f.last(), want)
		check(t, g.Runtime, "go-plugin")
		check(t, string(g.Governance), `{"enabled":true}`)
		if _, err := c.CreateGroup(ctx, "web", client.GroupRequest{Builtin: "demo"}); !isStatus(err, 409) {
			t.Fatalf("an existing group: %v", err)
		}
		check(t, c.RetireGroup(ctx, "canary"), nil)
		check(t, f.last(), []string{"retire", "canary"})
	})
	t.Run("jobs", func(t *testing.T) {
		j, err := c.PromoteGroup(ctx, "v2", "web", 4)
		check(t, err, nil)
		check(t, []any{j.Kind, j.Group, j.From}, []any{"promote", "v2", "web"})
		s, err := c.FollowJob(ctx, j.ID)
		check(t, err, nil)
		var last client.JobProgress
		for {
			p, err := s.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			check(t, err, nil)
			last = p
		}
		s.Close()
		check(t, f.last(), []any{"promote", "v2", "web", 4})
		if last.Job == nil || !last.Job.Done || last.Job.Moved != 1 {
			t.Fatalf("the job's last line: %+v", last)
		}

		j, err = c.PutRule(ctx, "qa-web", client.RuleRequest{Group: "web", Attr: "team", Value: "qa"}, 0)
		check(t, err, nil)
		check(t, j.Kind, "assign")
		check(t, f.last(), fsm.Rule{ID: "qa-web", Group: "web", Attr: "team", Value: "qa"})
		_, err = c.DeleteRule(ctx, "qa-web", 2)
		check(t, err, nil)
		check(t, f.last(), []string{"delete rule", "qa-web"})
		_, err = c.Rollback(ctx, 2)
		check(t, err, nil)
		if _, err := c.Rollback(ctx, 1000); !isStatus(err, 400) {
			t.Fatalf("a bad parallel: %v", err)
		}
	})
	t.Run("token", func(t *testing.T) {
		bad, err := client.New(client.Config{Address: c.Address(), Token: "guess"})
		check(t, err, nil)
		if _, err := bad.Tally(ctx); !isStatus(err, 403) || err.Error() != "wrong admin token" {
			t.Fatalf("a wrong token: %v", err)
		}
	})
}

// isStatus reports whether err is the API's answer with that status.
func isStatus(err error, status int) bool {
	var ae *client.Error
	return errors.As(err, &ae) && ae.Status == status
}
