package front

import (
	"context"
	"errors"
	"net/http"
	"testing"
)

func TestBodyBudget(t *testing.T) {
	b := newBodyBudget(100, nil)
	shrink, release, err := b.reserve(context.Background(), 80)
	if err != nil {
		t.Fatal(err)
	}
	// 20 left: a request of 30 waits, then is refused 503, retryable.
	if _, _, err := b.reserve(context.Background(), 30); err == nil {
		t.Fatal("a reservation past the budget was granted")
	} else if he := (*HTTPError)(nil); !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable || !he.Retry {
		t.Fatalf("refusal: %v, want a retryable 503", err)
	}
	// The first body was only 50 bytes: 50 left now.
	shrink(50)
	_, release2, err := b.reserve(context.Background(), 30)
	if err != nil {
		t.Fatalf("after the shrink: %v", err)
	}
	release()
	release() // once only
	release2()
	// All of it back.
	_, release3, err := b.reserve(context.Background(), 100)
	if err != nil {
		t.Fatalf("the whole budget after every release: %v", err)
	}
	release3()
	// A request larger than the budget takes all of it, not more.
	_, release4, err := b.reserve(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	release4()
}
