package fsm

import (
	"encoding/json"
	"fmt"
)

// MessageType is the leading byte of a log entry. Types are append-only: a
// retired number is never reused.
type MessageType uint8

const (
	ConnectRequestType    MessageType = 0
	LoginRequestType      MessageType = 1
	ForgetConnRequestType MessageType = 2
)

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
