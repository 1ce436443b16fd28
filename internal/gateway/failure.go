package gateway

import (
	"context"
	"errors"
	"fmt"
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
