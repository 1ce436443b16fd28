package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// A failure recorded by its word and message reads back as the same kind
// of error: a submitted call's caller gets the answer the call itself
// would have got (the gateway's own errors were once all "network").
func TestFailureRoundTrip(t *testing.T) {
	for _, err := range []error{
		ErrQueueFull, fmt.Errorf("%w %q", ErrUnknownModel, "gpt-9"), ErrBudget, ErrNoDeployment, ErrInterrupted, ErrQueueTimeout,
		&ProviderError{Kind: KindRateLimited, Message: "slow down"}, &ProviderError{Kind: KindBadRequest, Message: "bad"},
		context.DeadlineExceeded, context.Canceled,
	} {
		kind := FailureKind(err)
		back := FailureError(kind, err.Error())
		if FailureKind(back) != kind {
			t.Errorf("%v: recorded as %q, read back as %q (%v)", err, kind, FailureKind(back), back)
		}
		for _, s := range sentinels {
			if errors.Is(err, s) != errors.Is(back, s) {
				t.Errorf("%v read back as %v", err, back)
			}
		}
	}
	if FailureKind(ErrBudget) != "budget_exceeded" || FailureKind(ErrQueueFull) == string(KindNetwork) {
		t.Fatal("the gateway's own failures have their own words")
	}
}
