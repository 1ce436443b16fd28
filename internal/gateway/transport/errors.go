package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/stickyd/stickyd/internal/gateway"
)

// queueFullRetryAfter is the wait a caller is told on a full queue: the
// gateway does not know when a slot frees, and one second is the shortest
// wait Retry-After can say.
const queueFullRetryAfter = time.Second

// statusClientClosed is nginx's 499: the caller left before the answer. It
// is only logged; nobody reads it.
const statusClientClosed = 499

// apiError is how a failure reaches a caller, over any transport: the HTTP
// status with OpenAI's error type and code, the gRPC code, the message the
// caller may read, how long to wait before retrying (zero: not said) and
// the cause, for the log only.
type apiError struct {
	Status     int
	Code       codes.Code
	Type       string
	ErrCode    string
	Param      string
	Message    string
	RetryAfter time.Duration
	Err        error
}

func (e *apiError) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *apiError) Unwrap() error { return e.Err }

// OpenAI's error types the HTTP answers use.
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typeRateLimit      = "rate_limit_error"
	typeQuota          = "insufficient_quota"
	typeServer         = "server_error"
	typeTimeout        = "timeout_error"
)

// badRequest is the error for input the transport refuses itself; param
// names the offending field ("" when none does).
func badRequest(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: codes.InvalidArgument, Type: typeInvalidRequest,
		ErrCode: "invalid_request", Param: param, Message: fmt.Sprintf(format, args...)}
}

// toAPIError maps err, from the Service or a transport, to what the caller
// sees. The gateway's own errors carry client-safe text (the model's name,
// the budget spent). A provider's failure keeps its status class (a 4xx
// stays a 4xx, a 5xx is a 502 or 503) and its message, except a refusal
// of the gateway's credentials or quota, whose message may name the
// gateway's provider account. Anything unknown is a 500 whose cause stays
// in the log.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	e := &apiError{Err: err, Message: err.Error()}
	set := func(status int, code codes.Code, typ, errCode string) *apiError {
		e.Status, e.Code, e.Type, e.ErrCode = status, code, typ, errCode
		return e
	}
	var pe *gateway.ProviderError
	switch {
	case errors.Is(err, gateway.ErrNoJob):
		return set(http.StatusNotFound, codes.NotFound, typeInvalidRequest, "request_not_found")
	case errors.Is(err, gateway.ErrUnknownModel):
		e.Param = "model"
		return set(http.StatusNotFound, codes.NotFound, typeInvalidRequest, "model_not_found")
	case errors.Is(err, gateway.ErrQueueFull):
		e.RetryAfter = queueFullRetryAfter
		return set(http.StatusTooManyRequests, codes.ResourceExhausted, typeRateLimit, "queue_full")
	case errors.Is(err, gateway.ErrBudget):
		return set(http.StatusTooManyRequests, codes.ResourceExhausted, typeQuota, "budget_exceeded")
	case errors.Is(err, gateway.ErrRateLimit):
		// An API key's or tenant's RPM, TPM or concurrency.
		e.RetryAfter = time.Second
		var le *gateway.LimitError
		if errors.As(err, &le) && le.RetryAfter > 0 {
			e.RetryAfter = le.RetryAfter
		}
		return set(http.StatusTooManyRequests, codes.ResourceExhausted, typeRateLimit, "rate_limit_exceeded")
	case errors.Is(err, gateway.ErrModelNotAllowed):
		e.Param = "model"
		return set(http.StatusForbidden, codes.PermissionDenied, typeInvalidRequest, "model_not_allowed")
	case errors.Is(err, gateway.ErrQueueTimeout):
		return set(http.StatusGatewayTimeout, codes.DeadlineExceeded, typeTimeout, "queue_timeout")
	case errors.Is(err, gateway.ErrNoDeployment):
		// The wrapped text names the last provider's failure: log it only.
		e.Message = gateway.ErrNoDeployment.Error()
		return set(http.StatusServiceUnavailable, codes.Unavailable, typeServer, "no_deployment")
	case errors.Is(err, gateway.ErrInterrupted):
		e.Message = gateway.ErrInterrupted.Error()
		return set(http.StatusServiceUnavailable, codes.Unavailable, typeServer, "interrupted")
	case errors.Is(err, gateway.ErrUnavailable), errors.Is(err, gateway.ErrNotLeader):
		e.Message, e.RetryAfter = err.Error(), queueFullRetryAfter
		if errors.Is(err, gateway.ErrUnavailable) {
			e.Message = gateway.ErrUnavailable.Error() // the cause, raft's, for the log only
		}
		return set(http.StatusServiceUnavailable, codes.Unavailable, typeServer, "unavailable")
	case errors.As(err, &pe):
		return providerAPIError(e, pe)
	case errors.Is(err, context.DeadlineExceeded):
		e.Message = "the call ran out of time"
		return set(http.StatusGatewayTimeout, codes.DeadlineExceeded, typeTimeout, "timeout")
	case errors.Is(err, context.Canceled):
		e.Message = "the call was cancelled"
		return set(statusClientClosed, codes.Canceled, typeServer, "cancelled")
	}
	e.Message = "internal error"
	return set(http.StatusInternalServerError, codes.Internal, typeServer, "internal_error")
}

// providerAPIError maps a provider's refusal by its kind: what the request
// got wrong stays the caller's 4xx (the provider's own status, with its
// message), what the provider failed is a 502 or 503 with its message. A
// rate limit's or quota's message names the gateway's account and is not
// shown. An
// auth refusal is the gateway's credentials failing, not the caller's: HTTP
// says 502 so an OpenAI client does not take it for its own key being
// wrong, and the provider's message (which may quote the key) is not shown
// (gRPC keeps PermissionDenied, as the API documents).
func providerAPIError(e *apiError, pe *gateway.ProviderError) *apiError {
	e.RetryAfter = pe.RetryAfter
	e.Param = pe.Param
	set := func(status int, code codes.Code, typ, errCode, msg string) *apiError {
		e.Status, e.Code, e.Type, e.ErrCode, e.Message = status, code, typ, errCode, msg
		return e
	}
	with := func(msg string) string {
		if pe.Message != "" {
			msg += ": " + pe.Message
		}
		return msg
	}
	switch pe.Kind {
	case gateway.KindUnsupported:
		return set(http.StatusBadRequest, codes.InvalidArgument, typeInvalidRequest, "unsupported_parameter", pe.Message)
	case gateway.KindBadRequest:
		status := http.StatusBadRequest
		if pe.Status >= 400 && pe.Status < 500 && pe.Status != http.StatusUnauthorized && pe.Status != http.StatusForbidden {
			status = pe.Status // 404 (the provider's model), 413, 422
		}
		return set(status, codes.InvalidArgument, typeInvalidRequest, "provider_bad_request", with("the provider refused the request"))
	case gateway.KindAuth:
		return set(http.StatusBadGateway, codes.PermissionDenied, typeServer, "provider_auth",
			"the provider refused the gateway's credentials")
	case gateway.KindRateLimited:
		return set(http.StatusTooManyRequests, codes.ResourceExhausted, typeRateLimit, "provider_rate_limited",
			"the provider is rate limiting the gateway; retry later") // its message names the account's limits
	case gateway.KindQuotaExceeded:
		return set(http.StatusTooManyRequests, codes.ResourceExhausted, typeQuota, "provider_quota_exceeded",
			"the gateway's quota at the provider is spent")
	case gateway.KindOverloaded:
		return set(http.StatusServiceUnavailable, codes.Unavailable, typeServer, "provider_overloaded",
			with("the provider is overloaded; retry later"))
	case gateway.KindTimeout:
		return set(http.StatusGatewayTimeout, codes.DeadlineExceeded, typeTimeout, "provider_timeout",
			"the provider did not answer in time")
	case gateway.KindNetwork:
		return set(http.StatusBadGateway, codes.Unavailable, typeServer, "provider_unreachable",
			"the provider could not be reached")
	}
	msg := "the provider failed"
	if pe.Status != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", pe.Status)
	}
	return set(http.StatusBadGateway, codes.Unavailable, typeServer, "provider_error", with(msg))
}
