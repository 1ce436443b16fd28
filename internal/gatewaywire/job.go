package gatewaywire

import "time"

// JobState is where a submitted call is.
type JobState string

const (
	JobQueued    JobState = "queued"
	JobRunning   JobState = "running"
	JobDone      JobState = "done"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
)

// Job is a submitted call, as GET /v1/gateway/requests/{id} shows it.
type Job struct {
	ID        string    `json:"id"`
	State     JobState  `json:"state"`
	Model     string    `json:"model"`
	Session   string    `json:"session"`
	Submitted time.Time `json:"submitted"`
	Finished  time.Time `json:"finished,omitzero"`
	// Response when done; Error (and ErrorKind) when failed or cancelled.
	Response  *Response `json:"response,omitempty"`
	Error     string    `json:"error,omitempty"`
	ErrorKind string    `json:"error_kind,omitempty"`
}

// ErrNoJob: no submitted call has that id (404). It is here, not with the
// gateway's other errors, because the maps answer it when asked to change
// a call they do not hold; internal/gateway names it again.
var ErrNoJob = errorString("no such gateway request")

type errorString string

func (e errorString) Error() string { return string(e) }
