package gateway

import "github.com/stickyd/stickyd/internal/gatewaywire"

// The gateway's data as the replicated maps hold it is defined in
// gatewaywire, so that internal/fsm depends on it and not on this package
// (whose cluster half sits above the maps). These names keep it the
// gateway's words: users of the gateway write gateway.Call, gateway.Job
// and so on, and never need gatewaywire.

// A call and its answer.
type (
	// Message is one turn of a conversation.
	Message = gatewaywire.Message
	// Request is a completion request in the gateway's own terms.
	Request = gatewaywire.Request
	// Call is one caller's request as the gateway takes it.
	Call = gatewaywire.Call
	// Usage is what a call consumed, in tokens.
	Usage = gatewaywire.Usage
	// Response is a whole answer.
	Response = gatewaywire.Response

	// Part is one piece of a message's content.
	Part = gatewaywire.Part
	// ToolCall is a model's call of a tool.
	ToolCall = gatewaywire.ToolCall
	// Tool is a function the model may call.
	Tool = gatewaywire.Tool
	// ToolChoice says whether and which tool the model must call.
	ToolChoice = gatewaywire.ToolChoice
	// ResponseFormat asks for structured output.
	ResponseFormat = gatewaywire.ResponseFormat
	// Native is a request or answer in one provider API's own shape.
	Native = gatewaywire.Native
)

// The part types and native shapes (see gatewaywire).
const (
	PartText               = gatewaywire.PartText
	PartImage              = gatewaywire.PartImage
	ShapeOpenAIChat        = gatewaywire.ShapeOpenAIChat
	ShapeOpenAIEmbeddings  = gatewaywire.ShapeOpenAIEmbeddings
	ShapeAnthropicMessages = gatewaywire.ShapeAnthropicMessages
)

// A submitted call.
type (
	// JobState is where a submitted call is.
	JobState = gatewaywire.JobState
	// Job is a submitted call, as GET /v1/gateway/requests/{id} shows it.
	Job = gatewaywire.Job
)

// Where a submitted call is.
const (
	JobQueued    = gatewaywire.JobQueued
	JobRunning   = gatewaywire.JobRunning
	JobDone      = gatewaywire.JobDone
	JobFailed    = gatewaywire.JobFailed
	JobCancelled = gatewaywire.JobCancelled
)

// The cost counters.
type (
	// Counters are the cost counters: per session, per calendar day and in
	// total, in micro-dollars, with the tokens behind them.
	Counters = gatewaywire.Counters
	// Tally is one counter: its cost, its calls and their tokens.
	Tally = gatewaywire.Tally
	// Charge is one answer's cost, as the ledger records it.
	Charge = gatewaywire.Charge
	// Spend is what a call's payers have spent, in micro-dollars.
	Spend = gatewaywire.Spend
)
