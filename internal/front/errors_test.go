package front

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
)

// A bound that ran out on the way to the worker is a retryable refusal,
// over WebSocket and HTTP alike; an unknown error stays internal.
func TestDeadlineOnTheWayIsRetryable(t *testing.T) {
	err := fmt.Errorf("placing the connection: %w", context.DeadlineExceeded)
	a := errAnswer(7, err)
	if a.Code != "unavailable" || !a.Retry {
		t.Fatalf("answer to a deadline: %+v", a)
	}
	he, ok := knownError(err)
	if !ok || he.Status != http.StatusServiceUnavailable || !he.Retry {
		t.Fatalf("HTTP error of a deadline: %+v %v", he, ok)
	}
	if a := errAnswer(8, errors.New("boom")); a.Code != "internal" || a.Retry {
		t.Fatalf("answer to an unknown error: %+v", a)
	}
}
