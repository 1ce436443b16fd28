package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	apiclient "github.com/stickyd/stickyd/internal/api/client"
)

// maxFailures bounds the failed moves a job's outcome lists.
const maxFailures = 10

// client is what the provider's resources ask of the admin API, over the one
// client of that API (internal/api/client): the provider's own questions
// (does rule id exist? how did the job end?) answered from the API's calls.
// It has no HTTP of its own. It is safe for concurrent use: Terraform runs
// resources' operations in parallel.
type client struct {
	api *apiclient.Client
}

// newClient checks the address and the token and returns a client; it calls
// nothing.
func newClient(address, token string) (*client, error) {
	if token == "" {
		return nil, errors.New("no admin token: set token in the provider block or STICKYD_TOKEN")
	}
	c, err := apiclient.New(apiclient.Config{Address: address, Token: token})
	if errors.Is(err, apiclient.ErrBadAddress) {
		return nil, fmt.Errorf("address %q: want http(s)://HOST:PORT", address)
	}
	if err != nil {
		return nil, err
	}
	return &client{api: c}, nil
}

// isNotFound reports whether err is the API's 404.
func isNotFound(err error) bool { return apiclient.IsNotFound(err) }

// said words an answer that did not decode with the call it answered.
func said(err error) error {
	var de *apiclient.DecodeError
	switch {
	case errors.Is(err, apiclient.ErrNoJob) && errors.As(err, &de):
		return fmt.Errorf("the agent's answer to %s %s names no job", de.Method, de.Path)
	case errors.As(err, &de):
		return fmt.Errorf("decoding the answer to %s %s: %w", de.Method, de.Path, de.Err)
	}
	return err
}

// group returns a group as GET /v1/groups/{group} shows it; a 404 is an
// *apiclient.Error (see isNotFound).
func (c *client) group(ctx context.Context, name string) (apiclient.Group, error) {
	s, err := c.api.Group(ctx, name)
	return s.Group, said(err)
}

// createGroup records a group's recipe and returns it as the agent stored
// it (defaults applied). The API answers 409 if the group exists.
func (c *client) createGroup(ctx context.Context, name string, req apiclient.GroupRequest) (apiclient.GroupRecipe, error) {
	g, err := c.api.CreateGroup(ctx, name, req)
	return g, said(err)
}

// retireGroup retires a catalog group. The API refuses (409) while anyone
// is placed in it, while it is the default, or while a rule sends people
// there; it starts no job.
func (c *client) retireGroup(ctx context.Context, name string) error {
	return c.api.RetireGroup(ctx, name)
}

// rules lists the assignment rules.
func (c *client) rules(ctx context.Context) ([]apiclient.Rule, error) {
	rs, err := c.api.Rules(ctx)
	return rs, said(err)
}

// rule finds one rule; ok is false when there is none with that id.
func (c *client) rule(ctx context.Context, id string) (apiclient.Rule, bool, error) {
	all, err := c.rules(ctx)
	if err != nil {
		return apiclient.Rule{}, false, err
	}
	for _, r := range all {
		if r.ID == id {
			return r, true, nil
		}
	}
	return apiclient.Rule{}, false, nil
}

// putRule adds or replaces a rule, then follows the job that moves the
// people it concerns to its end. How the moves went is in the outcome; an
// error with an outcome naming no job means the rule was not stored, one
// naming the job means only following it failed.
func (c *client) putRule(ctx context.Context, id string, req apiclient.RuleRequest) (jobOutcome, error) {
	j, err := c.api.PutRule(ctx, id, req, 0)
	if err != nil {
		return jobOutcome{}, said(err)
	}
	return c.followJob(ctx, j.ID)
}

// deleteRule removes a rule, then follows the job that moves the people it
// sent away back to the group they now belong to. A missing rule is an
// *apiclient.Error 404.
func (c *client) deleteRule(ctx context.Context, id string) (jobOutcome, error) {
	j, err := c.api.DeleteRule(ctx, id, 0)
	if err != nil {
		return jobOutcome{}, said(err)
	}
	return c.followJob(ctx, j.ID)
}

// jobOutcome is how a job ended: its final state and the first failed
// moves (at most maxFailures), each as "user from → to: error".
type jobOutcome struct {
	Job      apiclient.Job
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

// followJob reads a job's progress until its final line. If ctx ends
// first, the agent carries on; the error says so. The outcome names the job
// even then.
func (c *client) followJob(ctx context.Context, id string) (jobOutcome, error) {
	out := jobOutcome{Job: apiclient.Job{ID: id}}
	stream, err := c.api.FollowJob(ctx, id)
	if err != nil {
		return out, fmt.Errorf("following job %s: %w", id, err)
	}
	defer stream.Close()
	failed := 0 // failed moves the stream showed
	for {
		p, err := stream.Next()
		if err != nil {
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
