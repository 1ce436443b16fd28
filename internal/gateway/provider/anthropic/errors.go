package anthropic

import (
	"context"
	"encoding/json"
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

// statusOverloaded is Anthropic's own status for "the API is overloaded
// for everyone" (error type overloaded_error).
const statusOverloaded = 529

// errorBody is Anthropic's error shape, in non-2xx answers and in a
// stream's error event: {"type":"error","error":{"type","message"}}.
type errorBody struct {
	Type  string    `json:"type"`
	Error wireError `json:"error"`
}

type wireError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	// Details.ErrorCode says which limit a 429 hit; the monthly spend cap
	// is enforced_spend_limit_reached.
	Details struct {
		ErrorCode string `json:"error_code"`
	} `json:"details"`
}

// quotaPhrases are what Anthropic's messages say when the account cannot
// spend any more (credit balance too low, spend or usage limit reached):
// waiting minutes does not help, so these are KindQuotaExceeded.
var quotaPhrases = []string{"credit balance", "spend limit", "spending limit", "usage limit"}

// statusError reads a non-2xx answer's body and classifies it.
func (a *Adapter) statusError(resp *http.Response) *gateway.ProviderError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	return classify(resp.StatusCode, resp.Header, body, a.now())
}

// classify turns a non-2xx answer into a ProviderError; now is the time
// the anthropic-ratelimit-*-reset headers are measured from.
func classify(status int, h http.Header, body []byte, now time.Time) *gateway.ProviderError {
	var eb errorBody
	if err := json.Unmarshal(body, &eb); err != nil || (eb.Error.Type == "" && eb.Error.Message == "") {
		// Not Anthropic's shape (a proxy's page, say): keep its start.
		msg := strings.TrimSpace(string(body))
		if len(msg) > 512 {
			msg = msg[:512]
		}
		eb.Error.Message = msg
	}
	pe := &gateway.ProviderError{Status: status, Type: eb.Error.Type, Message: eb.Error.Message}
	switch {
	case isQuotaRefusal(status, eb.Error):
		pe.Kind = gateway.KindQuotaExceeded
	case status == http.StatusTooManyRequests:
		pe.Kind = gateway.KindRateLimited
		pe.RetryAfter = retryAfter(h, now)
		if pe.RetryAfter == 0 {
			pe.RetryAfter = rateLimitReset(h, now)
		}
	case status == statusOverloaded, status == http.StatusServiceUnavailable, eb.Error.Type == "overloaded_error":
		pe.Kind = gateway.KindOverloaded
		pe.RetryAfter = retryAfter(h, now)
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		pe.Kind = gateway.KindAuth
	case status == http.StatusRequestTimeout:
		pe.Kind = gateway.KindTimeout
	case status >= 400 && status < 500:
		pe.Kind = gateway.KindBadRequest
	default: // 5xx, and any other status a 2xx-only caller did not expect
		pe.Kind = gateway.KindServer
	}
	return pe
}

// isQuotaRefusal reports whether the answer says the account's credit,
// spend or usage limit is reached: Anthropic says so with a 402
// billing_error, a 400 invalid_request_error ("Your credit balance is too
// low", "You have reached your specified API usage limits") or a 429
// rate_limit_error whose details name the spend limit. A 429 that is a
// plain rate limit does not match.
func isQuotaRefusal(status int, e wireError) bool {
	switch status {
	case http.StatusPaymentRequired:
		return true
	case http.StatusBadRequest, http.StatusTooManyRequests:
	default:
		return false
	}
	if e.Type == "billing_error" || strings.Contains(e.Details.ErrorCode, "spend_limit") {
		return true
	}
	msg := strings.ToLower(e.Message)
	for _, p := range quotaPhrases {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// retryAfter reads retry-after-ms, then retry-after (seconds, or an HTTP
// date, measured from now); 0 when neither says a positive wait.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("retry-after")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// rateLimitReset reads Anthropic's anthropic-ratelimit-<limit>-reset
// headers (RFC 3339 times) for the limits whose -remaining is 0, and
// returns the wait until the last of them resets; 0 when none says.
func rateLimitReset(h http.Header, now time.Time) time.Duration {
	var wait time.Duration
	for _, limit := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
		prefix := "anthropic-ratelimit-" + limit
		if h.Get(prefix+"-remaining") != "0" {
			continue
		}
		t, err := time.Parse(time.RFC3339, h.Get(prefix+"-reset"))
		if err != nil {
			continue
		}
		wait = max(wait, t.Sub(now))
	}
	return wait
}

// transportError classifies an error that got no answer: the caller's
// cancellation is returned wrapped as it is (it is not the provider's
// fault), a deadline is KindTimeout, anything else KindNetwork.
func transportError(ctx context.Context, doing string, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%s: %w", doing, ctx.Err())
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &gateway.ProviderError{Kind: gateway.KindTimeout, Message: fmt.Sprintf("%s: %v", doing, err)}
	}
	return &gateway.ProviderError{Kind: gateway.KindNetwork, Message: fmt.Sprintf("%s: %v", doing, err)}
}

// streamErrorKind is the kind of a stream's error event, by its type.
func streamErrorKind(errType string) gateway.ErrorKind {
	switch errType {
	case "overloaded_error":
		return gateway.KindOverloaded
	case "rate_limit_error":
		return gateway.KindRateLimited
	}
	return gateway.KindServer
}
