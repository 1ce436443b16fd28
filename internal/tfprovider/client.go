package tfprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
)

// The same bounds as the CLI's client (internal/command/client.go).
const (
	// dialTimeout bounds connecting, for every call, streams included.
	dialTimeout = 5 * time.Second
	// callTimeout bounds a whole call that is not a stream.
	callTimeout = 60 * time.Second
	// maxBody bounds what a call reads of an answer.
	maxBody = 64 << 20
	// maxFailures bounds the failed moves a job's outcome lists.
	maxFailures = 10
)

// client calls the stickyd admin API. It is safe for concurrent use:
// Terraform runs resources' operations in parallel.
type client struct {
	base  string // scheme://host[:port][/prefix], no trailing slash
	token string
	// call bounds a whole call; stream only bounds the dial, since a job
	// answers for as long as its moves take (the context ends it).
	call, stream *http.Client
}

// newClient checks the address and the token and returns a client; it calls
// nothing.
func newClient(address, token string) (*client, error) {
	if token == "" {
		return nil, errors.New("no admin token: set token in the provider block or STICKYD_TOKEN")
	}
	raw := strings.TrimSpace(address)
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("address %q: want http(s)://HOST:PORT", address)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   dialTimeout,
		IdleConnTimeout:       30 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &client{
		base:   u.String(),
		token:  token,
		call:   &http.Client{Transport: tr, Timeout: callTimeout},
		stream: &http.Client{Transport: tr},
	}, nil
}

// apiError is an answer outside 2xx: the status and the API's message.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return e.Message }

// isNotFound reports whether err is the API's 404.
func isNotFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// group returns a group as GET /v1/groups/{group} shows it; a 404 is an
// *apiError (see isNotFound).
func (c *client) group(ctx context.Context, name string) (api.GroupInfo, error) {
	var out struct {
		Group api.GroupInfo `json:"group"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/groups/"+url.PathEscape(name), nil, nil, &out)
	return out.Group, err
}

// createGroup records a group's recipe and returns it as the agent stored
// it (defaults applied). The API answers 409 if the group exists.
func (c *client) createGroup(ctx context.Context, name string, req api.GroupRequest) (fsm.GroupEntry, error) {
	var e fsm.GroupEntry
	err := c.do(ctx, http.MethodPut, "/v1/groups/"+url.PathEscape(name), nil, req, &e)
	return e, err
}

// retireGroup retires a catalog group. The API refuses (409) while anyone
// is placed in it, while it is the default, or while a rule sends people
// there; it starts no job.
func (c *client) retireGroup(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/groups/"+url.PathEscape(name), nil, nil, nil)
}

// rules lists the assignment rules.
func (c *client) rules(ctx context.Context) ([]fsm.Rule, error) {
	var out []fsm.Rule
	err := c.do(ctx, http.MethodGet, "/v1/rules", nil, nil, &out)
	return out, err
}

// rule finds one rule; ok is false when there is none with that id.
func (c *client) rule(ctx context.Context, id string) (fsm.Rule, bool, error) {
	all, err := c.rules(ctx)
	if err != nil {
		return fsm.Rule{}, false, err
	}
	for _, r := range all {
		if r.ID == id {
			return r, true, nil
		}
	}
	return fsm.Rule{}, false, nil
}

// putRule adds or replaces a rule, then follows the job that moves the
// people it concerns to its end. How the moves went is in the outcome; an
// error with an outcome naming no job means the rule was not stored, one
// naming the job means only following it failed.
func (c *client) putRule(ctx context.Context, id string, req api.RuleRequest) (jobOutcome, error) {
	return c.startJob(ctx, http.MethodPut, "/v1/rules/"+url.PathEscape(id), req)
}

// deleteRule removes a rule, then follows the job that moves the people it
// sent away back to the group they now belong to. A missing rule is an
// *apiError 404.
func (c *client) deleteRule(ctx context.Context, id string) (jobOutcome, error) {
	return c.startJob(ctx, http.MethodDelete, "/v1/rules/"+url.PathEscape(id), nil)
}

// jobOutcome is how a job ended: its final state and the first failed
// moves (at most maxFailures), each as "user from → to: error".
type jobOutcome struct {
	Job      api.Job
	Failures []string
}

// ok reports whether every move succeeded and the job did not stop early.
func (o jobOutcome) ok() bool { return o.Job.Error == "" && o.Job.Failed == 0 }

// summary describes the outcome for a diagnostic.
func (o jobOutcome) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s: %d of %d people moved, %d failed", o.Job.ID, o.Job.Moved, o.Job.Users, o.Job.Failed)
	if o.Job.Error != "" {
		fmt.Fprintf(&b, "; it stopped: %s", o.Job.Error)
	}
	for _, f := range o.Failures {
		b.WriteString("\n  " + f)
	}
	if o.Job.Failed > len(o.Failures) && len(o.Failures) > 0 {
		fmt.Fprintf(&b, "\n  ... and %d more", o.Job.Failed-len(o.Failures))
	}
	return b.String()
}

// startJob calls a route that starts a job, detached (as the CLI does), and
// follows the job to its end. The outcome names no job when the call
// itself failed.
func (c *client) startJob(ctx context.Context, method, path string, body any) (jobOutcome, error) {
	var j api.Job
	if err := c.do(ctx, method, path, url.Values{"detach": {"true"}}, body, &j); err != nil {
		return jobOutcome{}, err
	}
	if j.ID == "" {
		return jobOutcome{}, fmt.Errorf("the agent's answer to %s %s names no job", method, path)
	}
	return c.followJob(ctx, j.ID)
}

// followJob reads a job's NDJSON stream until its final line. If ctx ends
// first, the agent carries on; the error says so. The outcome names the job
// even then.
func (c *client) followJob(ctx context.Context, id string) (jobOutcome, error) {
	out := jobOutcome{Job: api.Job{ID: id}}
	resp, err := c.send(ctx, c.stream, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), url.Values{"follow": {"1"}}, nil)
	if err != nil {
		return out, fmt.Errorf("following job %s: %w", id, err)
	}
	defer resp.Body.Close()
	failed := 0 // failed moves the stream showed
	dec := json.NewDecoder(resp.Body)
	for {
		var p api.JobProgress
		if err := dec.Decode(&p); err != nil {
			switch {
			case ctx.Err() != nil:
				return out, fmt.Errorf("stopped following job %s; the agent carries on (GET /v1/jobs/%s): %w", id, id, ctx.Err())
			case errors.Is(err, io.EOF):
				return out, fmt.Errorf("the agent ended job %s's stream before the job finished", id)
			}
			return out, fmt.Errorf("reading job %s's progress: %w", id, err)
		}
		switch {
		case p.Job != nil:
			out.Job = *p.Job
			out.Job.Failed = max(out.Job.Failed, failed)
			return out, nil
		case p.Move != nil && p.Error != "":
			failed++
			if len(out.Failures) < maxFailures {
				out.Failures = append(out.Failures, fmt.Sprintf("%s %s → %s: %s", orDash(p.Move.User), orDash(p.Move.From), orDash(p.Move.To), p.Error))
			}
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// do calls method path with body encoded as JSON and decodes a 2xx answer
// into out (unless out is nil).
func (c *client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	resp, err := c.send(ctx, c.call, method, path, query, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return c.transportErr(err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decoding the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// send makes the call and turns an answer outside 2xx into an *apiError.
func (c *client) send(ctx context.Context, hc *http.Client, method, path string, query url.Values, body any) (*http.Response, error) {
	u := c.base + path
	if q := query.Encode(); q != "" {
		u += "?" + q
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding the request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("building the request: %w", err)
	}
	req.Header.Set("X-Stickyd-Token", c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, c.transportErr(err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return nil, errorFromBody(resp.StatusCode, b)
}

// errorFromBody reads {"error": "..."}; an answer without one (a proxy's
// page, say) is summed up by its status and first line.
func errorFromBody(status int, b []byte) *apiError {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return &apiError{Status: status, Message: e.Error}
	}
	msg := fmt.Sprintf("the admin API answered %d %s", status, http.StatusText(status))
	if line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n"); line != "" {
		if len(line) > 200 {
			line = line[:200] + "..."
		}
		msg += ": " + line
	}
	return &apiError{Status: status, Message: msg}
}

// transportErr says what went wrong below HTTP, naming the address.
func (c *client) transportErr(err error) error {
	inner := err
	var ue *url.Error
	if errors.As(err, &ue) {
		inner = ue.Err
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("cannot reach the stickyd admin API at %s: %w", c.base, inner)
	}
	return fmt.Errorf("calling the stickyd admin API at %s: %w", c.base, inner)
}
