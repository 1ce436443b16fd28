package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// A failure recorded by its word and message reads back as the same kind
// of error: a submitted call's caller gets the answer the call itself
// would have got (the gateway's own errors were once all "network").
func TestFailureRoundTrip(t *testing.T) {
	for _, err := range []error{
		ErrQueueFull, fmt.Errorf("%w %q", ErrUnknownModel, "gpt-9"), ErrBudget, ErrNoDeployment, ErrInterrupted, ErrQueueTimeout,
		&LimitError{Message: "rpm", RetryAfter: time.Second}, ErrModelNotAllowed,
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

// Cache writes are priced at their own rate (Anthropic's 1.25 × input
// when the deployment names none), not as plain input.
func TestCacheWritePrice(t *testing.T) {
	u := Usage{Input: 1_000_000, CacheWrite: 1_000_000, CachedInput: 1_000_000, Output: 1_000_000}
	if got := (Price{Input: 3, CachedInput: 0.3, Output: 15}).Cost(u); got != 3_000_000+3_750_000+300_000+15_000_000 {
		t.Fatalf("default cache-write price: %d micro-dollars", got)
	}
	if got := (Price{Input: 3, CachedInput: 0.3, CacheWrite: 6, Output: 15}).Cost(u); got != 3_000_000+6_000_000+300_000+15_000_000 {
		t.Fatalf("a cache-write price of its own: %d micro-dollars", got)
	}
}

// A failure told to another server comes back the same: a provider's
// status, message, parameter and wait, the gateway's own words.
func TestFailureAcrossServers(t *testing.T) {
	for _, err := range []error{
		&ProviderError{Kind: KindServer, Status: 500, Type: "server_error", Message: "boom"},
		&ProviderError{Kind: KindRateLimited, Status: 429, RetryAfter: 3 * time.Second},
		Unsupported("response_format", "no JSON mode"),
		fmt.Errorf("%w: session %q spent it", ErrBudget, "s"),
		&LimitError{Message: `API key "ci" made 2 calls in the last minute (rpm = 2)`, RetryAfter: 41 * time.Second},
		fmt.Errorf("%w: API key %q may not call model %q", ErrModelNotAllowed, "ci", "big"),
	} {
		back, ok := DecodeFailure(EncodeFailure(err))
		if !ok || back.Error() != err.Error() || FailureKind(back) != FailureKind(err) {
			t.Fatalf("%v came back as %v (%v)", err, back, ok)
		}
		var pe, bpe *ProviderError
		if errors.As(err, &pe) && (!errors.As(back, &bpe) || *bpe != *pe) {
			t.Fatalf("%+v came back as %+v", pe, back)
		}
		var le, ble *LimitError
		if errors.As(err, &le) && (!errors.As(back, &ble) || *ble != *le) {
			t.Fatalf("%+v came back as %+v", le, back)
		}
	}
	if _, ok := DecodeFailure("unknown model \"x\""); ok {
		t.Fatal("a plain message decoded")
	}
}
