package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

// quotaCodes are the error types and codes of a 429 that says the
// account's credit, spend limit or usage limit is reached: waiting does
// not help, so it must not be retried like a rate limit. OpenAI sends
// type "insufficient_quota" with one of these codes (or the same word
// as code, or a null code).
var quotaCodes = map[string]bool{
	"insufficient_quota":                true,
	"credit_balance_exhausted":          true,
	"organization_spend_limit_exceeded": true,
	"project_spend_limit_exceeded":      true,
	"organization_usage_limit_exceeded": true,
	"billing_hard_limit_reached":        true,
	"billing_not_active":                true,
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// statusError turns a non-2xx answer into a *gateway.ProviderError. It
// reads (a bounded part of) the body but leaves closing it to the caller.
func statusError(resp *http.Response, now time.Time) *gateway.ProviderError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e, ok := parseAPIError(body)
	if !ok {
		e.Message = fallbackMessage(resp.StatusCode, body)
	}
	pe := &gateway.ProviderError{
		Kind:    statusKind(resp.StatusCode, e),
		Status:  resp.StatusCode,
		Type:    e.ident(),
		Message: e.Message,
	}
	if pe.Kind == gateway.KindRateLimited || pe.Kind == gateway.KindOverloaded {
		pe.RetryAfter = retryAfter(resp.Header, now)
	}
	return pe
}

// statusKind classifies an HTTP status and the provider's error.
func statusKind(status int, e apiError) gateway.ErrorKind {
	switch {
	case status == http.StatusTooManyRequests:
		if quotaCodes[e.Type] || quotaCodes[e.Code] {
			return gateway.KindQuotaExceeded
		}
		return gateway.KindRateLimited
	case status == http.StatusPaymentRequired: // compatible gateways' "no credit left"
		return gateway.KindQuotaExceeded
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return gateway.KindAuth
	case status == http.StatusRequestTimeout:
		return gateway.KindTimeout
	case status == http.StatusServiceUnavailable, status == 529:
		return gateway.KindOverloaded
	case status >= 400 && status < 500:
		// 400, 404, 413, 422 and the other refusals of the request itself.
		return gateway.KindBadRequest
	}
	// 500, 502, 504, other 5xx, and statuses no API should answer with.
	return gateway.KindServer
}

// fallbackMessage describes an error answer that is not a JSON error
// (a proxy's HTML page, say): its status and the start of its body.
func fallbackMessage(status int, body []byte) string {
	msg := http.StatusText(status)
	text := strings.TrimSpace(string(body))
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	if text != "" {
		msg += ": " + text
	}
	return msg
}

// retryAfter reads how long the provider asked to wait: retry-after-ms
// (milliseconds, OpenAI's finer header) first, then retry-after (seconds
// or an HTTP date, RFC 9110). Zero when it did not say or said nonsense.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// transportError classifies err, returned by the HTTP client for a call
// under ctx: the caller's cancel passes through as the context's error,
// a deadline or a transport timeout is KindTimeout, anything else
// KindNetwork.
func transportError(ctx context.Context, doing string, err error) error {
	if ctx.Err() == context.Canceled {
		return fmt.Errorf("%s: %w", doing, context.Canceled)
	}
	var ne net.Error
	if ctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return &gateway.ProviderError{Kind: gateway.KindTimeout, Message: fmt.Sprintf("%s: %v", doing, err)}
	}
	return &gateway.ProviderError{Kind: gateway.KindNetwork, Message: fmt.Sprintf("%s: %v", doing, err)}
}
