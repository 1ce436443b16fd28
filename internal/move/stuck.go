package move

import (
	"context"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/placement"
)

// stuckBatch bounds the people one roll-back entry carries.
const stuckBatch = 1000

// RollBackStuck rolls back moves no mover will finish: a new leader's
// first step, since the moves the last leader was making died with it.
// Each stuck person (State moving) goes back home in the maps, in entries
// of up to stuckBatch people, and their old worker is told to thaw them:
// it may have frozen them for the dead leader, and a frozen person
// answers nothing until thawed. Moves this mover is making are left to
// it. It returns the people rolled back.
func (m *Mover) RollBackStuck(ctx context.Context, users []placement.UserInfo) ([]string, error) {
	var stuck []placement.UserInfo
	for _, u := range users {
		if _, mine := m.onRoad.Load(u.User); mine {
			// This mover raised the barrier in this process (a move begun
			// as the term began): it settles the move itself.
			continue
		}
		if u.State == placement.StateMoving {
			stuck = append(stuck, u)
		}
	}
	var back []string
	for len(stuck) > 0 {
		n := min(len(stuck), stuckBatch)
		part := stuck[:n]
		stuck = stuck[n:]
		var req fsm.MoveBatchRequest
		for _, u := range part {
			req.Abort = append(req.Abort, fsm.MoveAbortRequest{User: u.User, Epoch: u.Epoch})
		}
		res, err := m.applyBatch(ctx, req)
		if err != nil {
			return back, err
		}
		for i, u := range part {
			if i < len(res.Abort) && res.Abort[i].Err() != nil {
				m.cfg.Logger.Warn("rolling back an interrupted move", "user", u.User, "error", res.Abort[i].Err())
				continue
			}
			back = append(back, u.User)
			m.moves.WithLabelValues("leader_change", RolledBack).Inc()
			go func() {
				tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				if err := m.workers.Thaw(tctx, u.Worker, u.User, u.Epoch); err != nil {
					m.cfg.Logger.Warn("thawing a user after rolling back an interrupted move", "user", u.User, "worker", u.Worker, "error", err)
				}
			}()
		}
	}
	return back, nil
}
