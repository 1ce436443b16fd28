package fsm

import (
	"encoding/json"
	"fmt"
)

// SeenUsersRequestType records when people were last seen, many in one
// entry (lifecycle.forget_after forgets those not seen for that long).
const SeenUsersRequestType MessageType = 22

// SeenUsersRequest says each of Users was seen at At (unix seconds). A time
// earlier than the one recorded changes nothing; a person the maps do not
// hold is skipped.
type SeenUsersRequest struct {
	At    int64    `json:"at"`
	Users []string `json:"users"`
}

// SeenUsersResult counts the people whose time the entry moved on.
type SeenUsersResult struct {
	Stamped int `json:"stamped"`
}

func (f *FSM) applySeenUsers(buf []byte) interface{} {
	var req SeenUsersRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding seen users: %w", err)
	}
	var out SeenUsersResult
	for _, user := range req.Users {
		if h := f.state.Users[user]; h != nil && h.Seen < req.At {
			h.Seen = req.At
			out.Stamped++
		}
	}
	return out
}
