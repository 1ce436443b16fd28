package front

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"
)

// HTTPError is what a handler returns for a request it cannot serve: the
// status, the message the client may read, and the internal cause for logs.
type HTTPError struct {
	Status  int
	Message string
	// Retry marks a transient failure: the client should try again
	// (Retry-After on HTTP, "retry": true on the WebSocket).
	Retry bool
	// RetryAfter is the Retry-After in seconds (default 1 when Retry).
	RetryAfter int
	// Code names the refusal for WebSocket clients ("maintenance"); empty
	// derives it from Status.
	Code string
	Err  error
}

// retryAfter is the Retry-After header's value.
func (e *HTTPError) retryAfter() string {
	if e.RetryAfter > 0 {
		return strconv.Itoa(e.RetryAfter)
	}
	return "1"
}

func (e *HTTPError) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *HTTPError) Unwrap() error { return e.Err }

// knownError returns err as the client is told it: an HTTPError as it is,
// and a bound that ran out on the way to the worker (a write to the maps
// waiting out an election, a person's barrier; nothing was done) as a
// retryable 503. It reports false for any other error.
func knownError(err error) (*HTTPError, bool) {
	var he *HTTPError
	if errors.As(err, &he) {
		return he, true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &HTTPError{Status: http.StatusServiceUnavailable, Retry: true,
			Message: "timed out on the way to the worker (the cluster may be electing a leader); retry shortly", Err: err}, true
	}
	return nil, false
}

// handle adapts a handler that returns an error.
func (f *Front) handle(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		he, ok := knownError(err)
		if !ok {
			he = &HTTPError{Status: http.StatusInternalServerError, Message: "internal error", Err: err}
		}
		if he.Status >= 500 {
			f.log.Warn("request failed", "path", r.URL.Path, "status", he.Status, "error", err)
		}
		if he.Retry {
			w.Header().Set("Retry-After", he.retryAfter())
		}
		_ = writeJSON(w, he.Status, map[string]any{"error": he.Message, "retry": he.Retry})
		if he.Status == http.StatusServiceUnavailable || he.Status == http.StatusRequestEntityTooLarge {
			linger(w, r)
		}
	}
}

// A refusal that leaves a body unread (the body budget is full, the body
// is too large) is sent at once, then what the client goes on sending is
// read and dropped for a moment: a server that closes with bytes unread
// resets the connection, and a client still writing its body then sees
// "connection reset" instead of the 503 (or 413) that says to retry.
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 32 << 20
)

func linger(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, r.Body, lingerBytes)
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}
