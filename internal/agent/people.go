package agent

import (
	"context"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway/cluster"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// people is the supervisor as the admin API and the monitor show it: each
// person with what their calls to the gateway cost (a worker's calls pay
// from the person's session, named by the user). gw is nil without a
// gateway.
type people struct {
	sup  *supervisor.Supervisor
	maps *fsm.FSM
	gw   *cluster.Gateway
}

// UsersPage is a page of the maps' people, each with their gateway cost.
func (p people) UsersPage(q fsm.UserQuery) fsm.UserPage {
	page := p.maps.UsersPage(q)
	p.withCost(page.Users)
	return page
}

// Tally counts the maps' people without listing them.
func (p people) Tally() fsm.UserTally { return p.maps.Tally() }

// withCost fills in what each person's calls to the gateway cost.
func (p people) withCost(us []placement.UserInfo) {
	if p.gw == nil || len(us) == 0 {
		return
	}
	tallies := p.gw.Sessions(func(yield func(string) bool) {
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
}

func (p people) User(user string) (placement.UserInfo, bool) {
	u, ok := p.sup.User(user)
	if ok && p.gw != nil {
		t := p.gw.Sessions(func(yield func(string) bool) { yield(user) })[user]
		u.GatewayMicros, u.GatewayCalls = t.Micros, t.Calls
	}
	return u, ok
}

func (p people) Move(ctx context.Context, user, to, reason string) (move.Result, error) {
	return p.sup.Move(ctx, user, to, reason)
}

func (p people) MoveToGroup(ctx context.Context, user, group, reason string) (move.Result, error) {
	return p.sup.MoveToGroup(ctx, user, group, reason)
}

func (p people) Drain(ctx context.Context, worker string, parallel int, progress func(move.Result, error)) (supervisor.DrainResult, error) {
	return p.sup.Drain(ctx, worker, parallel, progress)
}

func (p people) ForgetUser(ctx context.Context, user string) (move.Forgotten, error) {
	return p.sup.ForgetUser(ctx, user)
}
