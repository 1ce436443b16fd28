package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The words for a failed call that are the gateway's own, not a
// provider's ErrorKind (a submitted call records one of either).
const (
	FailUnknownModel = "unknown_model"
	FailQueueFull    = "queue_full"
	FailQueueTimeout = "queue_timeout"
	FailBudget       = "budget_exceeded"
	FailNoDeployment = "no_deployment"
	FailInterrupted  = "interrupted"
	FailUnavailable  = "unavailable"
	FailNotLeader    = "not_leader"
	FailCancelled    = "cancelled"
	FailRateLimit    = "rate_limit_exceeded"
	FailModel        = "model_not_allowed"
)

// sentinels are the gateway's errors by their word.
var sentinels = map[string]error{
	FailUnknownModel: ErrUnknownModel,
	FailQueueFull:    ErrQueueFull,
	FailQueueTimeout: ErrQueueTimeout,
	FailBudget:       ErrBudget,
	FailNoDeployment: ErrNoDeployment,
	FailInterrupted:  ErrInterrupted,
	FailUnavailable:  ErrUnavailable,
	FailNotLeader:    ErrNotLeader,
	FailRateLimit:    ErrRateLimit,
	FailModel:        ErrModelNotAllowed,
}

// FailureKind is the word for why a call failed: one of the gateway's own
// (FailQueueFull…) or the provider's ErrorKind. A submitted call records
// it beside its message, so that FailureError can give the caller the
// same answer as the call would have.
func FailureKind(err error) string {
	for kind, s := range sentinels {
		if errors.Is(err, s) {
			return kind
		}
	}
	if errors.Is(err, context.Canceled) {
		return FailCancelled
	}
	return string(KindOf(err))
}

// FailureError is the error a recorded failure stands for: the gateway's
// own error (wrapped with msg) for its words, a ProviderError of that kind
// for a provider's.
func FailureError(kind, msg string) error {
	if s, ok := sentinels[kind]; ok {
		if msg == "" || msg == s.Error() {
			return s
		}
		return fmt.Errorf("%w: %s", s, msg)
	}
	switch kind {
	case FailCancelled:
		return fmt.Errorf("%w: %s", context.Canceled, msg)
	case string(KindTimeout):
		return fmt.Errorf("%w: %s", context.DeadlineExceeded, msg)
	}
	return &ProviderError{Kind: ErrorKind(kind), Message: msg}
}

// failureJSON is an error as one server tells another (a forwarded
// call's failure): enough to give the caller the same answer as the
// server that ran the call would have.
type failureJSON struct {
	Kind       string        `json:"gateway_failure"`
	Message    string        `json:"message"`
	Status     int           `json:"status,omitempty"`
	Type       string        `json:"type,omitempty"`
	Param      string        `json:"param,omitempty"`
	RetryAfter time.Duration `json:"retry_after,omitempty"`
}

// EncodeFailure words err for another server: DecodeFailure gives back an
// error of the same kind, the provider's status, type, parameter and
// Retry-After included.
func EncodeFailure(err error) string {
	f := failureJSON{Kind: FailureKind(err), Message: err.Error()}
	var pe *ProviderError
	var le *LimitError
	switch {
	case errors.As(err, &pe):
		f.Message, f.Status, f.Type, f.Param, f.RetryAfter = pe.Message, pe.Status, pe.Type, pe.Param, pe.RetryAfter
	case errors.As(err, &le):
		f.Message, f.RetryAfter = le.Message, le.RetryAfter
	}
	b, _ := json.Marshal(f)
	return string(b)
}

// DecodeFailure reads what EncodeFailure wrote; ok is false for any other
// text (an older server's plain message).
func DecodeFailure(s string) (err error, ok bool) {
	var f failureJSON
	if !strings.HasPrefix(s, `{"gateway_failure"`) || json.Unmarshal([]byte(s), &f) != nil || f.Kind == "" {
		return nil, false
	}
	if f.Kind == FailRateLimit {
		return &LimitError{Message: strings.TrimPrefix(f.Message, ErrRateLimit.Error()+": "), RetryAfter: f.RetryAfter}, true
	}
	if s, gw := sentinels[f.Kind]; gw {
		if rest, ok := strings.CutPrefix(f.Message, s.Error()); ok {
			return fmt.Errorf("%w%s", s, rest), true
		}
		return FailureError(f.Kind, f.Message), true
	}
	if f.Kind == FailCancelled {
		return FailureError(f.Kind, f.Message), true
	}
	return &ProviderError{Kind: ErrorKind(f.Kind), Status: f.Status, Type: f.Type, Message: f.Message, Param: f.Param, RetryAfter: f.RetryAfter}, true
}
