package agent

import (
	"context"

	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// people is the supervisor as the admin API and the monitor show it: each
// person with what their calls to the gateway cost (a worker's calls pay
// from the person's session, named by the user).
type people struct{ a *Agent }

func (p people) Users() []placement.UserInfo {
	us := p.a.sup.Users()
	if p.a.gw == nil {
		return us
	}
	tallies := p.a.gw.Sessions(func(yield func(string) bool) {
		for _, u := range us {
			if !yield(u.User) {
				return
			}
		}
	})
	for i := range us {
		t := tallies[us[i].User]
		us[i].GatewayMicros, us[i].GatewayCalls = t.Micros, t.Calls
	}
	return us
}

func (p people) User(user string) (placement.UserInfo, bool) {
	u, ok := p.a.sup.User(user)
	if ok && p.a.gw != nil {
		t := p.a.gw.Sessions(func(yield func(string) bool) { yield(user) })[user]
		u.GatewayMicros, u.GatewayCalls = t.Micros, t.Calls
	}
	return u, ok
}

func (p people) Move(ctx context.Context, user, to, reason string) (move.Result, error) {
	return p.a.sup.Move(ctx, user, to, reason)
}

func (p people) MoveToGroup(ctx context.Context, user, group, reason string) (move.Result, error) {
	return p.a.sup.MoveToGroup(ctx, user, group, reason)
}

func (p people) Drain(ctx context.Context, worker string, parallel int, progress func(move.Result, error)) (supervisor.DrainResult, error) {
	return p.a.sup.Drain(ctx, worker, parallel, progress)
}

func (p people) ForgetUser(ctx context.Context, user string) (move.Forgotten, error) {
	return p.a.sup.ForgetUser(ctx, user)
}
