package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// Service is what the transports (REST, gRPC, OpenAI-compatible HTTP)
// serve: every path goes through the same limits, failover and accounting.
type Service interface {
	// Complete runs call and returns the whole answer.
	Complete(ctx context.Context, call Call) (Response, error)
	// Stream runs call and streams the answer (see Adapter.Stream); the
	// last chunk carries Done and the usage, or Err.
	Stream(ctx context.Context, call Call) (<-chan Chunk, error)
	// Submit accepts call to run in the background and returns its id
	// at once (async REST); the call runs even if the caller goes away.
	Submit(ctx context.Context, call Call) (string, error)
	// Job reports a submitted call; ErrNoJob for an unknown id.
	Job(ctx context.Context, id string) (Job, error)
	// Cancel stops a submitted call that has not finished; ErrNoJob for
	// an unknown id.
	Cancel(ctx context.Context, id string) error
}

// Gateway errors a caller can act on; transports map them to statuses.
var (
	// ErrNoJob: no submitted call has that id (404). The maps answer it,
	// so it is gatewaywire's.
	ErrNoJob = gatewaywire.ErrNoJob
	// ErrUnknownModel: the model is not configured (400/404).
	ErrUnknownModel = errorString("unknown model")
	// ErrQueueFull: the model's queue is at its bound (429/503, retryable).
	ErrQueueFull = errorString("the model's queue is full")
	// ErrQueueTimeout: the call waited in the queue past its deadline (504).
	ErrQueueTimeout = errorString("the call waited in the queue past its deadline")
	// ErrBudget: a budget the call counts in (its session's, the day's,
	// its API key's or its tenant's) is spent, or cannot hold the call's
	// worst case (429, budget_exceeded).
	ErrBudget = errorString("budget exceeded")
	// ErrRateLimit: the call's API key or tenant is at its RPM, TPM or
	// concurrency (429 with Retry-After; a *LimitError says when).
	ErrRateLimit = errorString("rate limit exceeded")
	// ErrModelNotAllowed: the call's API key or tenant may not call the
	// model (403).
	ErrModelNotAllowed = errorString("the API key may not call this model")
	// ErrNoDeployment: every deployment of the model is unhealthy or
	// failed this call (502/503).
	ErrNoDeployment = errorString("no healthy deployment answered")
	// ErrInterrupted: the node running the call died with it; the call is
	// not run again, to never run twice (503, the caller decides).
	ErrInterrupted = errorString("the call was interrupted by a node failure and was not run again")
	// ErrNotLeader: this node no longer leads the cluster, so it starts no
	// call (the cluster's gateway passes the call to the new leader).
	ErrNotLeader = errorString("this gateway node no longer leads the cluster")
	// ErrUnavailable: the gateway could not record a submitted call (its
	// leader changed meanwhile); retry, with the same idempotency key to
	// be sure it runs once (503, Retry-After 1).
	ErrUnavailable = errorString("the gateway could not record the call (its leader changed); retry with the same idempotency key")
)

type errorString string

func (e errorString) Error() string { return string(e) }

// Waiter is a Service that can wait for a submitted call to end.
type Waiter interface {
	Wait(ctx context.Context, id string) (Job, error)
}

// CompleteOnce runs a call and returns its whole answer, as Complete does;
// a call that names an idempotency key runs as a submitted call, which
// records the key: the same call sent again (a retry after a lost answer)
// gets the first run's answer, and is never run twice.
func CompleteOnce(ctx context.Context, svc Service, call Call) (Response, error) {
	if call.IdempotencyKey == "" {
		return svc.Complete(ctx, call)
	}
	id, err := svc.Submit(ctx, call)
	if err != nil {
		return Response{}, err
	}
	for {
		var j Job
		if w, ok := svc.(Waiter); ok {
			j, err = w.Wait(ctx, id)
		} else {
			j, err = svc.Job(ctx, id)
		}
		if err != nil {
			return Response{}, err
		}
		switch j.State {
		case JobDone:
			if j.Response == nil {
				return Response{}, fmt.Errorf("the call %s ended without its answer", id)
			}
			return *j.Response, nil
		case JobFailed, JobCancelled:
			return Response{}, FailureError(j.ErrorKind, j.Error)
		}
		if err := ctx.Err(); err != nil {
			return Response{}, err
		}
		if _, ok := svc.(Waiter); !ok {
			select {
			case <-ctx.Done():
				return Response{}, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}
