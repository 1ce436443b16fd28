package move

import (
	"context"
	"fmt"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Forgotten says what forgetting a person did.
type Forgotten struct {
	User   string `json:"user"`
	Worker string `json:"worker"`
	Conns  int    `json:"conns"`
	// Package is the parked package that was deleted with them, if any.
	Package string `json:"package,omitempty"`
}

// Forget forgets people: one log entry (per maxParts) removes them and
// their connections from the maps, at the epoch the maps hold now (one who
// is moving, or moved meanwhile, is refused and kept); then their worker
// lets them go (fenced first, so a frame already on its way is answered
// MOVED, then dropped, their pages' subscriptions with them) and their
// parked package is deleted. Each person's outcome is told to done.
func (m *Mover) Forget(ctx context.Context, users []string, done func(Forgotten, error)) {
	for len(users) > 0 {
		n := min(len(users), maxParts)
		m.forgetBatch(ctx, users[:n], done)
		users = users[n:]
	}
}

func (m *Mover) forgetBatch(ctx context.Context, users []string, done func(Forgotten, error)) {
	req := fsm.ForgetUsersRequest{Now: time.Now().UnixNano()}
	var asked []string
	for _, user := range users {
		u, ok := m.maps.User(user)
		if !ok {
			done(Forgotten{User: user}, fmt.Errorf("forgetting %q: %w", user, fsm.ErrNoUser))
			continue
		}
		req.Users = append(req.Users, fsm.ForgetUser{User: user, Epoch: u.Epoch})
		asked = append(asked, user)
	}
	if len(req.Users) == 0 {
		return
	}
	entry, err := fsm.Encode(fsm.ForgetUsersRequestType, req)
	var res fsm.ForgetUsersResult
	if err == nil {
		var out any
		if out, err = m.log.Apply(ctx, entry); err == nil {
			var ok bool
			if res, ok = out.(fsm.ForgetUsersResult); !ok || len(res.Users) != len(req.Users) {
				err = fmt.Errorf("the log answered a forget with %T", out)
			}
		}
	}
	for i, user := range asked {
		if err != nil {
			done(Forgotten{User: user}, fmt.Errorf("forgetting %q: %w", user, err))
			continue
		}
		p := res.Users[i]
		if perr := p.Err(); perr != nil {
			done(Forgotten{User: user}, fmt.Errorf("forgetting %q: %w", user, perr))
			continue
		}
		m.letGo(ctx, p.User)
		done(Forgotten{User: user, Worker: p.User.Worker, Conns: p.User.Conns, Package: p.User.Package}, nil)
	}
}

// Dropper is the optional ability of Workers to evict a person who is
// forgotten: their worker keeps nothing of them, not even the fence of
// their epoch, so a new person of that name starts afresh.
type Dropper interface {
	Drop(ctx context.Context, worker, user string) error
}

// letGo has a forgotten person's worker drop them and deletes their parked
// package. A worker that is gone has nothing of them left to drop.
func (m *Mover) letGo(ctx context.Context, u placement.UserInfo) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := m.workers.Freeze(wctx, u.Worker, u.User, u.Epoch+1); err != nil {
		m.cfg.Logger.Debug("fencing a forgotten user", "user", u.User, "worker", u.Worker, "error", err)
	}
	evict := m.workers.Evict
	if d, ok := m.workers.(Dropper); ok {
		evict = d.Drop
	}
	if err := evict(wctx, u.Worker, u.User); err != nil {
		m.cfg.Logger.Debug("dropping a forgotten user", "user", u.User, "worker", u.Worker, "error", err)
	}
	if u.Package == "" {
		return
	}
	if b, err := m.store.Get(u.Package); err == nil {
		if base := protocol.PackageBase(b); base != "" {
			_ = m.store.Delete(base)
		}
	}
	_ = m.store.Delete(u.Package)
}
