package worker

import "github.com/stickyd/stickyd/plugins/worker/protocol"

// maxAnswered is how many of a page's recent messages are remembered by
// their msg_id (a client resends only what was in flight when its
// connection dropped, a handful), and maxAnsweredBytes how many bytes of
// answers: past either the oldest are forgotten.
const (
	maxAnswered      = 64
	maxAnsweredBytes = 256 << 10
)

// answered is a page's memory of its recent messages' answers, by msg_id,
// so that a message sent again (its answer lost with a connection, a
// restart, a move) is answered from it and never runs twice. It travels
// with the page in its package. Used from the person's mailbox only.
type answered struct {
	order []string // oldest first
	byID  map[string]*protocol.MessageResult
	bytes int // of the answers held
}

func resultBytes(r *protocol.MessageResult) int { return len(r.Data) + len(r.Error) + len(r.Code) }

func (a *answered) get(id string) (*protocol.MessageResult, bool) {
	r, ok := a.byID[id]
	return r, ok
}

// put remembers id's answer, forgetting the oldest past maxAnswered.
func (a *answered) put(id string, r *protocol.MessageResult) {
	if a.byID == nil {
		a.byID = map[string]*protocol.MessageResult{}
	}
	if _, ok := a.byID[id]; ok {
		return
	}
	a.byID[id] = r
	a.order = append(a.order, id)
	a.bytes += resultBytes(r)
	for len(a.order) > maxAnswered || a.bytes > maxAnsweredBytes && len(a.order) > 1 {
		old := a.order[0]
		a.bytes -= resultBytes(a.byID[old])
		delete(a.byID, old)
		a.order = append(a.order[:0:0], a.order[1:]...)
	}
}

// pack is the memory for a package, oldest first.
func (a *answered) pack() []*protocol.AnsweredMessage {
	if len(a.order) == 0 {
		return nil
	}
	out := make([]*protocol.AnsweredMessage, len(a.order))
	for i, id := range a.order {
		out[i] = &protocol.AnsweredMessage{MsgId: id, Result: a.byID[id]}
	}
	return out
}

// unpack takes the memory a package carried.
func (a *answered) unpack(ms []*protocol.AnsweredMessage) {
	for _, m := range ms {
		if m.GetMsgId() != "" && m.GetResult() != nil {
			a.put(m.MsgId, m.Result)
		}
	}
}
