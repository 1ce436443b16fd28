package fsm

import (
	"fmt"

	"github.com/stickyd/stickyd/internal/placement"
)

// ForgetUsersRequestType forgets people: their connections and their place
// in the maps, many in one entry.
const ForgetUsersRequestType MessageType = 21

// ForgetUsersRequest forgets each of Users, at the epoch it names (a person
// who moved since, or is moving, is refused and kept).
type ForgetUsersRequest struct {
	Users []ForgetUser `json:"users"`
	// Now is the writer's clock (unix nanoseconds), for the grants the
	// people held.
	Now int64 `json:"now,omitempty"`
}

// ForgetUser is one person of a ForgetUsersRequest.
type ForgetUser struct {
	User  string `json:"user"`
	Epoch uint64 `json:"epoch"`
}

// ForgetUsersResult is each person's outcome, in the request's order: their
// placement as it was (its Package is theirs to delete), or the refusal.
type ForgetUsersResult struct {
	Users []PartResult `json:"users"`
}

func (f *FSM) applyForgetUsers(buf body) interface{} {
	var req ForgetUsersRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding forget users: %w", err)
	}
	out := ForgetUsersResult{Users: make([]PartResult, len(req.Users))}
	gone := map[string]bool{}
	for i, fu := range req.Users {
		h, ok := f.state.Users.get(fu.User)
		switch {
		case !ok:
			out.Users[i] = part(placement.UserInfo{}, fmt.Errorf("%w: %q", ErrNoUser, fu.User))
			continue
		case h.State == placement.StateMoving:
			out.Users[i] = part(placement.UserInfo{}, fmt.Errorf("%w: %q is moving", ErrBusy, fu.User))
			continue
		case h.Epoch != fu.Epoch:
			out.Users[i] = part(placement.UserInfo{}, fmt.Errorf("%w: %q is at epoch %d, not %d", ErrBusy, fu.User, h.Epoch, fu.Epoch))
			continue
		}
		out.Users[i] = part(info(fu.User, h), nil)
		gone[fu.User] = true
		f.state.Users.del(fu.User)
		if f.load[h.Worker]--; f.load[h.Worker] <= 0 {
			delete(f.load, h.Worker)
		}
		f.releaseMovedLocked(fu.User, h.Worker, req.Now)
		f.touchLocked(fu.User)
	}
	if len(gone) > 0 {
		// One pass over the connections for the whole entry.
		var conns []string
		f.state.Conns.all(func(conn string, c Conn) bool {
			if gone[c.User] {
				conns = append(conns, conn)
			}
			return true
		})
		for _, conn := range conns {
			f.state.Conns.del(conn)
		}
	}
	return out
}
