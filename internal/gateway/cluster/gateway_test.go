package cluster

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stickyd/stickyd/internal/gateway"
)

// refusal is a Refusal as Server.Fetch returns one.
type refusal struct {
	status int
	msg    string
}

func (r *refusal) Error() string   { return r.msg }
func (r *refusal) StatusCode() int { return r.status }

// A leader's refusal comes back as the gateway's own error: its sentinel
// when the message starts with one, else a provider error of the status's
// kind.
func TestGatewayError(t *testing.T) {
	plain := errors.New("dialing")
	if got := gatewayError(plain); got != plain {
		t.Fatalf("not a refusal: got %v", got)
	}
	err := gatewayError(fmt.Errorf("calling: %w", &refusal{http.StatusTooManyRequests, gateway.ErrQueueFull.Error() + ": small"}))
	if !errors.Is(err, gateway.ErrQueueFull) || err.Error() != gateway.ErrQueueFull.Error()+": small" {
		t.Fatalf("sentinel: got %v", err)
	}
	for status, kind := range map[int]gateway.ErrorKind{http.StatusBadRequest: gateway.KindBadRequest,
		http.StatusTooManyRequests: gateway.KindRateLimited, http.StatusGatewayTimeout: gateway.KindTimeout,
		http.StatusBadGateway: gateway.KindServer} {
		var pe *gateway.ProviderError
		if err := gatewayError(&refusal{status, "no"}); !errors.As(err, &pe) || pe.Kind != kind || pe.Status != status {
			t.Errorf("status %d: got %v, want kind %s", status, err, kind)
		}
	}
}

// Every gateway error has its HTTP status on the leader's internal routes.
func TestGatewayStatus(t *testing.T) {
	for err, want := range map[error]int{
		gateway.ErrUnknownModel:    http.StatusNotFound,
		gateway.ErrNoJob:           http.StatusNotFound,
		gateway.ErrQueueFull:       http.StatusTooManyRequests,
		gateway.ErrBudget:          http.StatusTooManyRequests,
		gateway.ErrRateLimit:       http.StatusTooManyRequests,
		gateway.ErrModelNotAllowed: http.StatusForbidden,
		gateway.ErrQueueTimeout:    http.StatusGatewayTimeout,
		&gateway.ProviderError{Kind: gateway.KindBadRequest}: http.StatusBadRequest,
		errors.New("other"): http.StatusBadGateway,
	} {
		if got := gatewayStatus(err); got != want {
			t.Errorf("%v: got %d, want %d", err, got, want)
		}
	}
}
