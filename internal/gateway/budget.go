package gateway

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// Budgets that never overshoot (docs/gateway.md): before a call with a
// budget starts, its worst-case cost is reserved against every budget it
// counts in (its session's, the day's, its API key's, its tenant's); a
// call whose reservation does not fit what is left is refused
// ErrBudget. When the call ends, its charge settles the reservation: the
// reservation is released and the true cost counted, at once.

// The data of budgets, as the maps hold it (see gatewaywire).
type (
	// Scope is one counter a budget holds.
	Scope = gatewaywire.Scope
	// Reservation holds a call's worst-case cost until it is settled.
	Reservation = gatewaywire.Reservation
	// Limits bound the calls of a key or a tenant (RPM, TPM, concurrency).
	Limits = gatewaywire.Limits
	// Allowance is what a key or a tenant may spend and call.
	Allowance = gatewaywire.Allowance
)

// Budget is one bound a call's cost must fit: the counter it holds, its
// figure in micro-dollars, and its name in a refusal (`API key "ci"`).
type Budget struct {
	Scope Scope
	Limit int64
	Label string
}

// Access is what an API key created through the admin API may do
// (Config.Access): its allowance, and its tenant's (Tenant "": none).
type Access struct {
	Tenant          string
	KeyAllowance    Allowance
	TenantAllowance Allowance
}

// FitBudgets refuses a call of worst-case cost worst that does not fit
// one of budgets: one whose counter, with what calls under way hold, is
// already at its figure, or would pass it with worst. spentIn returns a
// scope's spend and what reservations hold in it. The refusal wraps
// ErrBudget and names the budget.
func FitBudgets(budgets []Budget, worst int64, spentIn func(Scope) (spent, held int64)) error {
	for _, b := range budgets {
		spent, held := spentIn(b.Scope)
		if spent+held < b.Limit && spent+held+worst <= b.Limit {
			continue
		}
		when := ""
		switch b.Scope.Period {
		case gatewaywire.PeriodDay:
			when = " today"
		case gatewaywire.PeriodMonth:
			when = " this month"
		}
		msg := fmt.Sprintf("%s spent %s of %s%s", b.Label, Dollars(spent), Dollars(b.Limit), when)
		if spent < b.Limit {
			msg += fmt.Sprintf(", %s held by calls under way; this call may cost up to %s", Dollars(held), Dollars(worst))
		}
		return fmt.Errorf("%w: %s", ErrBudget, msg)
	}
	return nil
}

// The prompt's estimate (EstimatePrompt): an upper bound, since every
// byte-level tokenizer (OpenAI's, Anthropic's, Llama's) makes at most one
// token of each byte of text.
const (
	// imageTokens is what an image counts: more than OpenAI, Anthropic
	// and Gemini bill for one.
	imageTokens = 4096
	// messageTokens is a message's, a tool's or a tool call's own
	// overhead (its role and the separators around it; OpenAI counts 3
	// or 4); primingTokens the answer's priming.
	messageTokens = 8
	primingTokens = 8
)

// EstimatePrompt bounds the prompt tokens of req: every byte of its text
// (the messages' text, names, tool calls and their arguments, the tools'
// names, descriptions and schemas, the response format's schema) counts a
// token, each message, tool and tool call 8 more, each image 4,096, and 8
// for the answer's priming. When the request has what the fields do not
// carry (members only its API has, Extra: OpenAI's prediction,
// Anthropic's cache_control...; content parts other than text and
// images: audio, files, documents), the estimate is at least the bytes of
// the caller's own body (Native), its images' URLs counted as images.
func EstimatePrompt(req Request) int64 {
	n, images, imageBytes := int64(primingTokens), int64(0), int64(0)
	unmodelled := len(req.Extra) > 0
	for _, m := range req.Messages {
		n += messageTokens + int64(len(m.Role)+len(m.Name)+len(m.ToolCallID)+len(m.Content))
		for _, p := range m.Parts {
			n += int64(len(p.Text))
			switch p.Type {
			case PartText:
			case PartImage:
				images++
				imageBytes += int64(len(p.URL))
			default:
				n += int64(len(p.URL))
				unmodelled = true
			}
		}
		for _, tc := range m.ToolCalls {
			n += messageTokens + int64(len(tc.ID)+len(tc.Name)+len(tc.Arguments))
		}
	}
	for _, t := range req.Tools {
		n += messageTokens + int64(len(t.Name)+len(t.Description)+len(t.Parameters))
	}
	if rf := req.ResponseFormat; rf != nil {
		n += int64(len(rf.Type) + len(rf.Name) + len(rf.Description) + len(rf.Schema))
	}
	for _, s := range req.Stop {
		n += int64(len(s))
	}
	n += images * imageTokens
	if unmodelled && req.Native != nil {
		n = max(n, int64(len(req.Native.Body))-imageBytes+images*imageTokens)
	}
	return n
}

// outputBound is the most tokens req's answers may hold: its max_tokens
// or max_completion_tokens (the larger), else the model's cap, times the
// answers asked for (n); 0 when neither the call nor the model says.
func outputBound(req Request, modelCap int) int64 {
	out := max(req.MaxTokens, req.MaxCompletionTokens)
	if out <= 0 {
		out = modelCap
	}
	return int64(max(out, 0)) * int64(max(req.N, 1))
}

// worst is the most usage of prompt and output tokens can cost at p:
// every prompt token at the dearest of its input prices (plain, cached,
// cache write), rounded up.
func (p Price) worst(prompt, output int64) int64 {
	write := p.CacheWrite
	if write == 0 {
		write = cacheWriteFactor * p.Input
	}
	in := max(p.Input, p.CachedInput, write)
	return int64(math.Ceil(float64(prompt)*in + float64(output)*p.Output))
}

// worstCost is the worst case of a call of prompt and output tokens on
// m: at the dearest of the deployments that may serve it.
func (m *model) worstCost(prompt, output int64) int64 {
	var w int64
	for _, d := range m.deps {
		w = max(w, d.Price.worst(prompt, output))
	}
	return w
}

// admission is what a call's admission decided, carried in its context
// to the charge that settles it: the day it counts on, its tenant, its
// reservation, and the key's and tenant's windows its tokens count in.
type admission struct {
	day, tenant string
	reservation string
	limited     []string
	// endLimits ends the call's hold on its limits (once: at its charge
	// or its end, whichever comes first).
	endLimits func()
	// settled turns true once the reservation is settled or released.
	settled atomic.Bool
	// attempts counts the attempts on deployments, when traced.
	attempts atomic.Int32
}

type admissionKey struct{}

// admissionOf is the admission of the call ctx belongs to (nil: none).
func admissionOf(ctx context.Context) *admission {
	a, _ := ctx.Value(admissionKey{}).(*admission)
	return a
}

// budgets are the budgets call counts in, on day: the session's and the
// day's (the gateway's), its API key's and its tenant's.
func (r *Router) budgets(call Call, acc Access, keyed bool, day string) []Budget {
	var out []Budget
	if r.cfg.SessionBudget > 0 {
		out = append(out, Budget{Scope: Scope{Kind: gatewaywire.ScopeSession, Name: call.Session}, Limit: r.cfg.SessionBudget,
			Label: fmt.Sprintf("session %q", call.Session)})
	}
	if call.Key != "" {
		label := fmt.Sprintf("API key %q", call.Key)
		switch {
		case keyed && acc.KeyAllowance.BudgetMicros > 0:
			a := acc.KeyAllowance
			out = append(out, Budget{Scope: gatewaywire.PeriodScope(gatewaywire.ScopeKey, call.Key, a.Period, day), Limit: a.BudgetMicros, Label: label})
		default:
			b := r.cfg.KeyBudget
			if kb, ok := r.cfg.KeyBudgets[call.Key]; ok && !keyed {
				b = kb
			}
			if b > 0 {
				out = append(out, Budget{Scope: Scope{Kind: gatewaywire.ScopeKey, Name: call.Key}, Limit: b, Label: label})
			}
		}
	}
	if keyed && acc.Tenant != "" && acc.TenantAllowance.BudgetMicros > 0 {
		a := acc.TenantAllowance
		out = append(out, Budget{Scope: gatewaywire.PeriodScope(gatewaywire.ScopeTenant, acc.Tenant, a.Period, day), Limit: a.BudgetMicros,
			Label: fmt.Sprintf("tenant %q", acc.Tenant)})
	}
	if r.cfg.DayBudget > 0 {
		out = append(out, Budget{Scope: Scope{Kind: gatewaywire.ScopeDay, Name: day}, Limit: r.cfg.DayBudget, Label: "today"})
	}
	return out
}

// reservationBound is how long a call may run once it has its slot: a
// try of each deployment and one more (call_timeout each) and the
// longest wait for rate limits. A reservation expires then, and the call
// is held to it.
func (r *Router) reservationBound(m *model) time.Duration {
	return time.Duration(len(m.deps)+1)*r.cfg.CallTimeout + r.cfg.RetryAfterCap
}
