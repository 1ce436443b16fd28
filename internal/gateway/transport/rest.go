package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

// submitBody is POST /v1/gateway/requests's body: a completion request,
// who pays and its idempotency key (else the Idempotency-Key header).
type submitBody struct {
	completionBody
	Session        string `json:"session"`
	IdempotencyKey string `json:"idempotency_key"`
	// Stream is refused: an async request's answer is read whole.
	Stream bool `json:"stream"`
}

// restOnly are the members of submitBody that are the route's own, not
// the chat completion request's.
var restOnly = []string{"session", "idempotency_key", "stream"}

// withoutMembers returns the JSON object raw without the named members
// (its members then in the order of their names).
func withoutMembers(raw []byte, names ...string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, badRequest("", "invalid JSON body: %v", err)
	}
	n := len(m)
	for _, k := range names {
		delete(m, k)
	}
	if len(m) == n {
		return raw, nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(b.Bytes()), nil
}

// submitted is the 202 answer to a submission.
type submitted struct {
	ID    string           `json:"id"`
	State gateway.JobState `json:"state"`
	Links submittedLinks   `json:"links"`
}

// submittedLinks are where to follow a submitted call: self (GET),
// wait (GET, long poll) and cancel (DELETE).
type submittedLinks struct {
	Self   string `json:"self"`
	Wait   string `json:"wait"`
	Cancel string `json:"cancel"`
}

// submit serves POST /v1/gateway/requests.
func (h *httpServer) submit(w http.ResponseWriter, r *http.Request, caller string) error {
	var body submitBody
	raw, err := h.decodeBody(w, r, &body)
	if err != nil {
		return err
	}
	if body.Stream {
		return badRequest("stream", "stream is not supported on async requests: use POST %s", completionsPath)
	}
	body.extra = findExtra(raw, restOnly...)
	req, err := body.toRequest()
	if err != nil {
		return err
	}
	// The provider gets the chat completion request without the members
	// that are this route's own.
	native, err := withoutMembers(raw, restOnly...)
	if err != nil {
		return err
	}
	req.Native = &gateway.Native{Shape: gateway.ShapeOpenAIChat, Body: native}
	call := gateway.Call{
		Request:        req,
		Session:        sessionOf(caller, body.Session, r.Header.Get(SessionHeader), req.User),
		Key:            caller,
		IdempotencyKey: firstOf(body.IdempotencyKey, r.Header.Get(idempotencyKey)),
	}
	id, err := h.svc.Submit(r.Context(), call)
	if err != nil {
		return err
	}
	state := gateway.JobQueued
	if j, err := h.svc.Job(r.Context(), id); err == nil {
		state = j.State
	}
	self := requestsPath + "/" + url.PathEscape(id)
	w.Header().Set("Location", self)
	writeJSON(w, http.StatusAccepted, submitted{ID: id, State: state, Links: submittedLinks{
		Self: self, Wait: self + "?wait=30s", Cancel: self,
	}})
	return nil
}

// getJob serves GET /v1/gateway/requests/{id}[?wait=duration].
func (h *httpServer) getJob(w http.ResponseWriter, r *http.Request, _ string) error {
	wait, err := parseWait(r.URL.Query().Get("wait"))
	if err != nil {
		return err
	}
	j, err := h.job(r.Context(), r.PathValue("id"), wait)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, j)
	return nil
}

// parseWait reads ?wait=: a Go duration ("10s", "1m") or whole seconds
// ("10"), at most maxWait (longer waits are cut to it); "" is no wait.
func parseWait(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n, nerr := strconv.Atoi(s)
		if nerr != nil {
			return 0, badRequest("wait", "wait=%q: want a duration such as 10s", s)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, badRequest("wait", "wait=%q must not be negative", s)
	}
	return min(d, maxWait), nil
}

// job reads a job, waiting up to wait for it to end.
func (h *httpServer) job(ctx context.Context, id string, wait time.Duration) (gateway.Job, error) {
	if wait <= 0 {
		return h.svc.Job(ctx, id)
	}
	if jw, ok := h.svc.(JobWaiter); ok {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		j, err := jw.Wait(wctx, id)
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			// The waiter gave up with its context: the wait is over,
			// report the job as it is.
			return h.svc.Job(ctx, id)
		}
		return j, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	tick := time.NewTicker(h.opts.PollInterval)
	defer tick.Stop()
	for {
		j, err := h.svc.Job(ctx, id)
		if err != nil || finished(j.State) {
			return j, err
		}
		select {
		case <-ctx.Done():
			return j, nil
		case <-timer.C:
			return j, nil
		case <-tick.C:
		}
	}
}

// cancelJob serves DELETE /v1/gateway/requests/{id}: 200 with the job, 409
// when it had already ended.
func (h *httpServer) cancelJob(w http.ResponseWriter, r *http.Request, _ string) error {
	id := r.PathValue("id")
	j, err := h.svc.Job(r.Context(), id)
	if err != nil {
		return err
	}
	if finished(j.State) {
		return alreadyFinished(j)
	}
	if err := h.svc.Cancel(r.Context(), id); err != nil {
		return err
	}
	if j, err = h.svc.Job(r.Context(), id); err != nil {
		return err
	}
	if j.State == gateway.JobDone || j.State == gateway.JobFailed {
		// It ended on its own between the read and the cancel.
		return alreadyFinished(j)
	}
	writeJSON(w, http.StatusOK, j)
	return nil
}

func alreadyFinished(j gateway.Job) error {
	return &apiError{Status: http.StatusConflict, Type: typeInvalidRequest, ErrCode: "already_finished",
		Message: fmt.Sprintf("gateway request %s already ended: %s", j.ID, j.State)}
}
