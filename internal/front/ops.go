package front

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// maxPullWait bounds how long one pull waits for a first delta.
const maxPullWait = 25 * time.Second

// op is one request of a page: the JSON the browser sends on its WebSocket
// or to POST /_stickyd/op.
type op struct {
	Op    string          `json:"op"`
	ID    uint64          `json:"id"`
	Page  string          `json:"page"`
	Kind  string          `json:"kind,omitempty"`
	After uint64          `json:"after,omitempty"`
	Wait  int64           `json:"wait,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
	// MsgID is the page's own name of a msg, kept when it is sent again:
	// the worker answers a msg_id it answered recently from memory.
	MsgID string `json:"msg_id,omitempty"`
}

// answer is what the front sends back for an op.
type answer struct {
	// Op is "reply" or "error". A reply with Error is the app's refusal
	// (the message ran), with the app's Code ("refused" unless it said
	// one) and Retry.
	Op     string          `json:"op"`
	ID     uint64          `json:"id"`
	Worker string          `json:"worker,omitempty"`
	Opened *opened         `json:"opened,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"`
	Deltas []delta         `json:"deltas,omitempty"`
	Last   uint64          `json:"last,omitempty"`
	Error  string          `json:"error,omitempty"`
	Retry  bool            `json:"retry,omitempty"`
	Code   string          `json:"code,omitempty"`
}

type opened struct {
	Page   string `json:"page"`
	Kind   string `json:"kind"`
	Seq    uint64 `json:"seq"`
	Notice string `json:"notice,omitempty"`
	Resync bool   `json:"resync,omitempty"`
	Base   uint64 `json:"base"`
}

type delta struct {
	Seq    uint64          `json:"seq"`
	Op     string          `json:"op"`
	Path   string          `json:"path,omitempty"`
	Value  json.RawMessage `json:"value,omitempty"`
	Notice string          `json:"notice,omitempty"`
}

var deltaOps = map[protocol.Delta_Op]string{protocol.Delta_SET: "set", protocol.Delta_DELETE: "delete", protocol.Delta_RESET: "reset"}

// frame checks an op and builds its frame; the routing fields are stamped
// when it is sent.
func (o *op) frame() (*protocol.Frame, time.Duration, error) {
	if o.Page == "" || len(o.Page) > 128 {
		return nil, 0, &HTTPError{Status: http.StatusBadRequest, Message: "an op needs a page id of 1-128 bytes"}
	}
	f := &protocol.Frame{}
	extra := time.Duration(0)
	switch o.Op {
	case "open":
		f.Kind = &protocol.Frame_Open{Open: &protocol.PageOpen{Page: o.Page, Kind: o.Kind, After: o.After}}
	case "msg":
		if len(o.Data) == 0 {
			return nil, 0, &HTTPError{Status: http.StatusBadRequest, Message: "a msg op needs data"}
		}
		if len(o.MsgID) > 128 {
			return nil, 0, &HTTPError{Status: http.StatusBadRequest, Message: "a msg_id is at most 128 bytes"}
		}
		f.Kind = &protocol.Frame_Message{Message: &protocol.PageMessage{Page: o.Page, Data: o.Data, MsgId: o.MsgID}}
	case "pull":
		wait := time.Duration(o.Wait) * time.Millisecond
		if wait < 0 {
			return nil, 0, &HTTPError{Status: http.StatusBadRequest, Message: "wait must not be negative"}
		}
		wait = min(wait, maxPullWait)
		extra = wait
		f.Kind = &protocol.Frame_Pull{Pull: &protocol.PagePull{Page: o.Page, After: o.After, WaitMs: uint32(wait / time.Millisecond)}}
	case "close":
		f.Kind = &protocol.Frame_Close{Close: &protocol.PageClose{Page: o.Page}}
	default:
		return nil, 0, &HTTPError{Status: http.StatusBadRequest, Message: fmt.Sprintf("unknown op %q (want open, msg, pull or close)", o.Op)}
	}
	return f, extra, nil
}

// toAnswer turns a worker's reply into the browser's answer.
func toAnswer(id uint64, rep *protocol.FrameReply) *answer {
	a := &answer{Op: "reply", ID: id, Worker: rep.WorkerId}
	switch k := rep.Kind.(type) {
	case *protocol.FrameReply_Opened:
		o := k.Opened
		a.Opened = &opened{Page: o.Page, Kind: o.Kind, Seq: o.Seq, Notice: o.Notice, Resync: o.Resync, Base: o.Base}
	case *protocol.FrameReply_Message:
		if k.Message.Error != "" {
			a.Error, a.Code, a.Retry = k.Message.Error, appCode(k.Message), k.Message.Retry
		} else if len(k.Message.Data) > 0 {
			a.Data = k.Message.Data
		}
	case *protocol.FrameReply_Deltas:
		a.Last = k.Deltas.Last
		a.Deltas = make([]delta, len(k.Deltas.Deltas))
		for i, d := range k.Deltas.Deltas {
			a.Deltas[i] = delta{Seq: d.Seq, Op: deltaOps[d.Op], Path: d.Path, Notice: d.Notice}
			if len(d.Value) > 0 {
				a.Deltas[i].Value = d.Value
			}
		}
	}
	return a
}

// appCode is the code of an app's refusal: its own, or "refused" (an SDK
// that does not say one).
func appCode(m *protocol.MessageResult) string {
	if m.Code != "" {
		return m.Code
	}
	return "refused"
}

func errAnswer(id uint64, err error) *answer {
	a := &answer{Op: "error", ID: id, Error: err.Error(), Code: "internal"}
	if he, ok := knownError(err); ok {
		a.Error, a.Retry = he.Message, he.Retry
		switch he.Status {
		case http.StatusBadRequest:
			a.Code = "bad_request"
		case http.StatusServiceUnavailable:
			a.Code = "unavailable"
		case http.StatusUnauthorized:
			a.Code = "no_connection"
		case http.StatusRequestEntityTooLarge:
			a.Code = "too_large"
		case http.StatusRequestTimeout:
			a.Code = "timeout"
		}
		if he.Code != "" {
			a.Code = he.Code
		}
	}
	return a
}

// runOp runs one op synchronously, for the HTTP fallback.
func (f *Front) runOp(ctx context.Context, conn string, o *op) *answer {
	fr, extra, err := o.frame()
	if err != nil {
		return errAnswer(o.ID, err)
	}
	rep, _, err := f.deliver(ctx, conn, fr, f.cfg.FrameTimeout+extra)
	if err != nil {
		return errAnswer(o.ID, err)
	}
	return toAnswer(o.ID, rep)
}

// serveOp is the long-poll fallback: one op per POST, same JSON as the
// WebSocket. Every answer, refusals included, is an op answer ("op":
// "error" with its code, and "retry" for what did not run and may be sent
// again), with the HTTP status that goes with it.
//
// Every answer says the largest op the front reads (maxMessageHeader), so
// a page on the fallback refuses a bigger message itself.
func (f *Front) serveOp(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set(maxMessageHeader, strconv.FormatInt(f.cfg.MaxMessageBytes, 10))
	var o op
	a := f.fallbackOp(w, r, &o)
	status := http.StatusOK
	if a.Op == "error" {
		status = http.StatusBadRequest
		switch a.Code {
		case "no_connection":
			status = http.StatusUnauthorized
		case "too_large":
			status = http.StatusRequestEntityTooLarge
		case "timeout":
			status = http.StatusRequestTimeout
		}
		if a.Retry {
			status = http.StatusServiceUnavailable
			if a.Code == errRateLimited.Code {
				status = http.StatusTooManyRequests
			}
			w.Header().Set("Retry-After", "1")
			if a.Code == "maintenance" {
				w.Header().Set("Retry-After", strconv.Itoa(maintenanceRetryAfter))
			}
		}
	}
	err := writeJSON(w, status, a)
	if status == http.StatusRequestEntityTooLarge || status == http.StatusServiceUnavailable {
		// The body may be unread (too large, or no room in the budget):
		// the client still writing it gets this answer, not a reset.
		linger(w, r)
	}
	return err
}

// maxMessageHeader is the header of POST /_stickyd/op's answers that says
// front.max_message_bytes.
const maxMessageHeader = "X-Stickyd-Max-Message-Bytes"

// fallbackOp reads and runs one op of the fallback, refusals as answers.
func (f *Front) fallbackOp(w http.ResponseWriter, r *http.Request, o *op) *answer {
	rt, ok := f.route(w, r)
	if !ok {
		return errAnswer(0, errNoConnection)
	}
	body, release, err := f.readBody(w, r, f.cfg.MaxMessageBytes)
	defer release()
	if err != nil {
		return errAnswer(0, err)
	}
	if err := json.Unmarshal(body, o); err != nil {
		return errAnswer(0, &HTTPError{Status: http.StatusBadRequest, Message: "decoding op: " + err.Error()})
	}
	if !f.allowFrame(rt.Conn, rt.User, viaOp) {
		return errAnswer(o.ID, errRateLimited)
	}
	return f.runOp(r.Context(), rt.Conn, o)
}

var errNoConnection = &HTTPError{Status: http.StatusUnauthorized,
	Message: "no valid connection cookie: load a page of this site first (a tampered or expired cookie is not accepted)"}
