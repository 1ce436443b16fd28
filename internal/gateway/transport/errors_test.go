package transport

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/stickyd/stickyd/internal/gateway"
)

// errorCase is how one Service error must reach callers, over HTTP and
// gRPC.
type errorCase struct {
	name string
	err  error
	// HTTP status, OpenAI type and code, Retry-After ("" for none).
	status     int
	typ, code  string
	retryAfter string
	// grpc is the gRPC code; retryDelay the RetryInfo detail (0: none).
	grpc       codes.Code
	retryDelay time.Duration
	// shown must be in the message, hidden must not.
	shown, hidden string
}

var errorCases = []errorCase{
	{name: "unknown model", err: fmt.Errorf("%w %q", gateway.ErrUnknownModel, "gpt-9"),
		status: 404, typ: "invalid_request_error", code: "model_not_found", grpc: codes.NotFound, shown: `unknown model "gpt-9"`},
	{name: "queue full", err: gateway.ErrQueueFull,
		status: 429, typ: "rate_limit_error", code: "queue_full", retryAfter: "1", grpc: codes.ResourceExhausted, retryDelay: time.Second, shown: "queue is full"},
	{name: "budget", err: fmt.Errorf("%w: session %q spent $1.000000 of $1.000000", gateway.ErrBudget, "s1"),
		status: 429, typ: "insufficient_quota", code: "budget_exceeded", grpc: codes.ResourceExhausted, shown: `budget exceeded: session "s1" spent`},
	{name: "an API key's rate limit", err: &gateway.LimitError{Message: `API key "ci" made 2 calls in the last minute (rpm = 2)`, RetryAfter: 41 * time.Second},
		status: 429, typ: "rate_limit_error", code: "rate_limit_exceeded", retryAfter: "41", grpc: codes.ResourceExhausted, retryDelay: 41 * time.Second, shown: `rate limit exceeded: API key "ci" made 2 calls`},
	{name: "a model outside the key's list", err: fmt.Errorf("%w: API key %q may not call model %q", gateway.ErrModelNotAllowed, "ci", "big"),
		status: 403, typ: "invalid_request_error", code: "model_not_allowed", grpc: codes.PermissionDenied, shown: `may not call model "big"`},
	{name: "queue timeout", err: gateway.ErrQueueTimeout,
		status: 504, typ: "timeout_error", code: "queue_timeout", grpc: codes.DeadlineExceeded, shown: "waited in the queue"},
	{name: "no deployment", err: fmt.Errorf("%w: last: %v", gateway.ErrNoDeployment, &gateway.ProviderError{Kind: gateway.KindServer, Message: "org-secret broke"}),
		status: 503, typ: "server_error", code: "no_deployment", grpc: codes.Unavailable, shown: "no healthy deployment", hidden: "org-secret"},
	{name: "interrupted", err: gateway.ErrInterrupted,
		status: 503, typ: "server_error", code: "interrupted", grpc: codes.Unavailable, shown: "node failure"},
	{name: "unavailable (a leader change while recording)", err: fmt.Errorf("%w: %v", gateway.ErrUnavailable, errors.New("leadership lost while committing log")),
		status: 503, typ: "server_error", code: "unavailable", retryAfter: "1", grpc: codes.Unavailable, retryDelay: time.Second, shown: "same idempotency key", hidden: "committing log"},
	{name: "provider bad request", err: &gateway.ProviderError{Kind: gateway.KindBadRequest, Status: 400, Message: "max_tokens is too large"},
		status: 400, typ: "invalid_request_error", code: "provider_bad_request", grpc: codes.InvalidArgument, shown: "max_tokens is too large"},
	{name: "provider auth", err: &gateway.ProviderError{Kind: gateway.KindAuth, Status: 401, Message: "Incorrect API key sk-abcd"},
		status: 502, typ: "server_error", code: "provider_auth", grpc: codes.PermissionDenied, shown: "credentials", hidden: "sk-abcd"},
	{name: "provider rate limited", err: &gateway.ProviderError{Kind: gateway.KindRateLimited, Status: 429, RetryAfter: 2500 * time.Millisecond, Message: "org-secret"},
		status: 429, typ: "rate_limit_error", code: "provider_rate_limited", retryAfter: "3", grpc: codes.ResourceExhausted, retryDelay: 2500 * time.Millisecond, hidden: "org-secret"},
	{name: "provider quota", err: &gateway.ProviderError{Kind: gateway.KindQuotaExceeded, Status: 429},
		status: 429, typ: "insufficient_quota", code: "provider_quota_exceeded", grpc: codes.ResourceExhausted},
	{name: "provider overloaded", err: &gateway.ProviderError{Kind: gateway.KindOverloaded, Status: 529},
		status: 503, typ: "server_error", code: "provider_overloaded", grpc: codes.Unavailable},
	{name: "provider server", err: &gateway.ProviderError{Kind: gateway.KindServer, Status: 500},
		status: 502, typ: "server_error", code: "provider_error", grpc: codes.Unavailable},
	{name: "provider timeout", err: &gateway.ProviderError{Kind: gateway.KindTimeout},
		status: 504, typ: "timeout_error", code: "provider_timeout", grpc: codes.DeadlineExceeded},
	{name: "provider network", err: &gateway.ProviderError{Kind: gateway.KindNetwork},
		status: 502, typ: "server_error", code: "provider_unreachable", grpc: codes.Unavailable},
	{name: "internal", err: errors.New("disk on fire"),
		status: 500, typ: "server_error", code: "internal_error", grpc: codes.Internal, shown: "internal error", hidden: "disk"},
}
