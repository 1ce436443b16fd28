package fsm

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/store"
)

// MessageType is the leading byte of a log entry. Types are append-only: a
// retired number is never reused.
type MessageType uint8

const (
	ConnectRequestType    MessageType = 0
	LoginRequestType      MessageType = 1
	ForgetConnRequestType MessageType = 2
	MoveBeginRequestType  MessageType = 3
	MoveCommitRequestType MessageType = 4
	MoveAbortRequestType  MessageType = 5
	WokenRequestType      MessageType = 6
	// RegisterAgentRequestType records an AgentEntry.
	RegisterAgentRequestType MessageType = 7
)

var (
	// ErrNoUser is returned for a user the maps do not hold.
	ErrNoUser = errors.New("no such user")
	// ErrBusy is returned when a move does not match the user's state.
	ErrBusy = errors.New("user is not in the state the move expects")
	// ErrConnTaken refuses to bind a connection name another connection
	// already holds.
	ErrConnTaken = placement.ErrConnTaken
)

// MoveBeginRequest raises the barrier for a move of User from From (at
// Epoch) to To; the user's epoch becomes Epoch+1.
type MoveBeginRequest struct {
	User  string `json:"user"`
	From  string `json:"from"`
	To    string `json:"to"`
	Epoch uint64 `json:"epoch"`
}

// MoveCommitRequest reassigns a moving user (at Epoch, the move's) to To,
// parked on Package; an empty Package means their state was lost.
type MoveCommitRequest struct {
	User    string `json:"user"`
	To      string `json:"to"`
	Epoch   uint64 `json:"epoch"`
	Package string `json:"package,omitempty"`
	// Now is the mover's clock (unix nanoseconds), for the grants the
	// person's departure lets go.
	Now int64 `json:"now,omitempty"`
}

// MoveAbortRequest rolls a move back: the user stays home.
type MoveAbortRequest struct {
	User  string `json:"user"`
	Epoch uint64 `json:"epoch"`
}

// WokenRequest records that User woke from Package.
type WokenRequest struct {
	User    string `json:"user"`
	Package string `json:"package"`
}

// ConnectRequest binds a new connection, named by the site, to a user (the
// connection's anonymous user when User is empty). A user without a home gets
// Worker as their home.
type ConnectRequest struct {
	Conn   string `json:"conn"`
	User   string `json:"user,omitempty"`
	Worker string `json:"worker"`
}

// LoginRequest rebinds a connection to the person the site declared. If the
// person has no home yet, the connection's worker becomes it.
type LoginRequest struct {
	Conn string `json:"conn"`
	User string `json:"user"`
	// Attrs, when not nil, replace the person's recorded attributes.
	Attrs map[string]string `json:"attrs,omitempty"`
}

// LoginResult is the route after a login, and the worker that held the
// connection before it (to release it there if the person lives elsewhere).
type LoginResult struct {
	Route    Route
	Previous string
}

// ForgetConnRequest removes a connection.
type ForgetConnRequest struct {
	Conn string `json:"conn"`
}

// Encode builds a log entry: the type byte, then the JSON body.
func Encode(t MessageType, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding log entry %d: %w", t, err)
	}
	return append([]byte{byte(t)}, b...), nil
}

// DecodeResult decodes the JSON form of what Apply returned for an entry of
// type t, as a leader sends it to a follower that forwarded the write.
func DecodeResult(t MessageType, b []byte) (any, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var v any
	switch t {
	case ConnectRequestType:
		v = new(Route)
	case LoginRequestType:
		v = new(LoginResult)
	case MoveBeginRequestType, MoveCommitRequestType, MoveAbortRequestType, WokenRequestType:
		v = new(placement.UserInfo)
	case StoreOpRequestType:
		v = new(StoreResult)
	case MoveBatchRequestType:
		v = new(MoveBatchResult)
	case ConnectBatchRequestType:
		v = new(ConnectBatchResult)
	case ForgetUsersRequestType:
		v = new(ForgetUsersResult)
	case GatewayJobRequestType:
		v = new(string)
	default:
		return nil, nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("decoding the result of entry type %d: %w", t, err)
	}
	switch x := v.(type) {
	case *Route:
		return *x, nil
	case *LoginResult:
		return *x, nil
	case *placement.UserInfo:
		return *x, nil
	case *StoreResult:
		return *x, nil
	case *MoveBatchResult:
		return *x, nil
	case *ConnectBatchResult:
		return *x, nil
	case *ForgetUsersResult:
		return *x, nil
	case *string:
		return *x, nil
	}
	return v, nil
}

// ErrorKind names a sentinel error for the wire ("" for any other).
func ErrorKind(err error) string {
	switch {
	case errors.Is(err, ErrNoUser):
		return "no_user"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, ErrGroupInUse):
		return "group_in_use"
	case errors.Is(err, ErrConnTaken):
		return "conn_taken"
	case errors.Is(err, store.ErrStaleGrant):
		return "stale_grant"
	case errors.Is(err, ErrGatewayExists):
		return "gateway_exists"
	case errors.Is(err, ErrGatewayMissing):
		return "gateway_missing"
	case errors.Is(err, ErrGatewayInUse):
		return "gateway_in_use"
	}
	return ""
}

// KindError rebuilds an error a leader reported, wrapping its sentinel.
func KindError(kind, msg string) error {
	switch kind {
	case "no_user":
		return fmt.Errorf("%w (on the leader: %s)", ErrNoUser, msg)
	case "busy":
		return fmt.Errorf("%w (on the leader: %s)", ErrBusy, msg)
	case "group_in_use":
		return fmt.Errorf("%w (on the leader: %s)", ErrGroupInUse, msg)
	case "conn_taken":
		return fmt.Errorf("%w (on the leader: %s)", ErrConnTaken, msg)
	case "stale_grant":
		return fmt.Errorf("%w (on the leader: %s)", store.ErrStaleGrant, msg)
	case "gateway_exists", "gateway_missing", "gateway_in_use":
		// The leader's message names the key or tenant: keep it whole.
		s := map[string]error{"gateway_exists": ErrGatewayExists, "gateway_missing": ErrGatewayMissing, "gateway_in_use": ErrGatewayInUse}[kind]
		return wrapped{msg: msg, err: s}
	}
	return errors.New(msg)
}

// wrapped is an error whose message is the leader's, wrapping a sentinel.
type wrapped struct {
	msg string
	err error
}

func (w wrapped) Error() string { return w.msg }
func (w wrapped) Unwrap() error { return w.err }
