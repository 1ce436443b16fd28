// Package transport serves a gateway.Service to callers outside the
// process: gRPC (gatewaypb.Gateway, GRPCServer), async REST
// (/v1/gateway/requests) and OpenAI's chat completions API
// (/v1/chat/completions), both in HTTPHandler.
//
// It decodes, names the session that pays, calls the Service and encodes,
// mapping the gateway's errors to each transport's statuses in one table
// (errors.go). It never retries, queues, fails over or accounts: every path
// goes through the Service, so every path gets the same limits and costs.
package transport

import (
	"context"
	"fmt"
	"strings"

	"github.com/stickyd/stickyd/internal/gateway"
)

// JobWaiter is an optional ability of a gateway.Service: waiting for a
// submitted call to end. Wait returns the job when it finished or when ctx
// is done (the job as it is then); ErrNoJob for an unknown id. Long polls
// (GET /v1/gateway/requests/{id}?wait=) use it when the Service has it and
// read the job again every HTTPOptions.PollInterval otherwise.
type JobWaiter interface {
	Wait(ctx context.Context, id string) (gateway.Job, error)
}

// SessionHeader names the session that pays for an HTTP call; its gRPC
// counterpart is the metadata key SessionMetadata.
const (
	SessionHeader   = "X-Stickyd-Session"
	SessionMetadata = "x-stickyd-session"
)

// firstOf returns the first non-empty string: how every transport picks the
// session (the request's own field, then the header or metadata, then the
// request's user, then the authenticated caller's name).
func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// checkRequest refuses a request no provider could serve, before it takes
// a place in a queue.
func checkRequest(req gateway.Request) error {
	if req.Model == "" {
		return badRequest("model", "model is required")
	}
	if len(req.Messages) == 0 {
		return badRequest("messages", "messages must hold at least one message")
	}
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user", "assistant":
		case "tool":
			if m.ToolCallID == "" {
				return badRequest(fmt.Sprintf("messages[%d].tool_call_id", i), "messages[%d] is a tool's answer without its tool_call_id", i)
			}
		default:
			return badRequest(fmt.Sprintf("messages[%d].role", i),
				"messages[%d].role is %q: only system, developer, user, assistant and tool messages are supported", i, m.Role)
		}
	}
	if req.MaxTokens < 0 {
		return badRequest("max_tokens", "max_tokens must not be negative")
	}
	return nil
}

// finished reports whether a job has ended.
func finished(s gateway.JobState) bool {
	return s == gateway.JobDone || s == gateway.JobFailed || s == gateway.JobCancelled
}

// sessionOf is the session a call pays from: the one it names (the first
// of named that is set: the body's, the header's, the request's user),
// else the caller's. A caller that authenticated with an API key pays
// only from sessions under its own name ("billing-team/maria"): naming a
// session does not let one key spend another's budget or read as it.
func sessionOf(caller string, named ...string) string {
	s := firstOf(named...)
	switch {
	case s == "":
		return caller
	case caller == "" || s == caller || strings.HasPrefix(s, caller+"/"):
		return s
	}
	return caller + "/" + s
}
