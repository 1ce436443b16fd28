package gemini

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

// apiError is Google's error object, {"error": {...}}: the HTTP code, the
// message, the canonical status (RESOURCE_EXHAUSTED...) and details such
// as RetryInfo, QuotaFailure and ErrorInfo.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  string `json:"status"`
	Details []struct {
		Type string `json:"@type"`
		// RetryInfo
		RetryDelay string `json:"retryDelay"`
		// ErrorInfo
		Reason string `json:"reason"`
		// QuotaFailure
		Violations []struct {
			QuotaID     string `json:"quotaId"`
			QuotaMetric string `json:"quotaMetric"`
		} `json:"violations"`
	} `json:"details"`
}

// statusError turns a non-2xx answer into a *gateway.ProviderError. It
// reads (a bounded part of) the body but leaves closing it to the caller.
func statusError(resp *http.Response) *gateway.ProviderError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var wrapper struct {
		Error *apiError `json:"error"`
	}
	// Some proxies answer a list holding the error.
	if err := json.Unmarshal(body, &wrapper); err != nil || wrapper.Error == nil {
		var list []struct {
			Error *apiError `json:"error"`
		}
		if json.Unmarshal(body, &list) == nil && len(list) > 0 && list[0].Error != nil {
			wrapper.Error = list[0].Error
		}
	}
	if wrapper.Error == nil {
		text := strings.TrimSpace(string(body))
		if len(text) > 200 {
			text = text[:200] + "..."
		}
		msg := http.StatusText(resp.StatusCode)
		if text != "" {
			msg += ": " + text
		}
		wrapper.Error = &apiError{Code: resp.StatusCode, Message: msg}
	}
	return wrapper.Error.providerError(resp.StatusCode, resp.Header)
}

// providerError classifies the error of an answer of HTTP status (0: an
// event of a stream, whose code says it).
func (e *apiError) providerError(status int, h http.Header) *gateway.ProviderError {
	if status == 0 || status/100 == 2 {
		status = e.Code
	}
	pe := &gateway.ProviderError{Kind: e.kind(status), Status: status, Type: e.Status, Message: e.Message}
	if pe.Kind == gateway.KindRateLimited || pe.Kind == gateway.KindOverloaded {
		pe.RetryAfter = e.retryDelay()
		if pe.RetryAfter == 0 && h != nil {
			if s, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After"))); err == nil && s > 0 {
				pe.RetryAfter = time.Duration(s) * time.Second
			}
		}
	}
	return pe
}

// kind classifies by the canonical status first, the HTTP status then.
// A RESOURCE_EXHAUSTED whose quota is per day is the quota spent (waiting
// a minute does not lift it); any other is a rate limit. An invalid key
// is INVALID_ARGUMENT with the reason API_KEY_INVALID: an auth failure.
func (e *apiError) kind(status int) gateway.ErrorKind {
	for _, d := range e.Details {
		if d.Reason == "API_KEY_INVALID" || d.Reason == "API_KEY_SERVICE_BLOCKED" {
			return gateway.KindAuth
		}
	}
	switch e.Status {
	case "RESOURCE_EXHAUSTED":
		for _, d := range e.Details {
			for _, v := range d.Violations {
				if strings.Contains(v.QuotaID, "PerDay") {
					return gateway.KindQuotaExceeded
				}
			}
		}
		return gateway.KindRateLimited
	case "UNAUTHENTICATED", "PERMISSION_DENIED":
		return gateway.KindAuth
	case "UNAVAILABLE":
		return gateway.KindOverloaded
	case "DEADLINE_EXCEEDED":
		return gateway.KindTimeout
	case "INTERNAL", "UNKNOWN", "DATA_LOSS":
		return gateway.KindServer
	case "INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND", "OUT_OF_RANGE", "ALREADY_EXISTS", "ABORTED", "CANCELLED":
		return gateway.KindBadRequest
	}
	switch {
	case status == http.StatusTooManyRequests:
		return gateway.KindRateLimited
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return gateway.KindAuth
	case status == http.StatusServiceUnavailable:
		return gateway.KindOverloaded
	case status == http.StatusGatewayTimeout || status == http.StatusRequestTimeout:
		return gateway.KindTimeout
	case status >= 400 && status < 500:
		return gateway.KindBadRequest
	}
	return gateway.KindServer
}

// retryDelay is RetryInfo's delay ("37s", "0.5s"); 0 when none.
func (e *apiError) retryDelay() time.Duration {
	for _, d := range e.Details {
		if d.RetryDelay == "" {
			continue
		}
		if v, err := time.ParseDuration(d.RetryDelay); err == nil && v > 0 {
			return v
		}
	}
	return 0
}
