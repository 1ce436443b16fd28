package worker

import (
	"strconv"
	"testing"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// A message sent again with a msg_id the page answered is answered from
// memory and does not run again, on its worker and, after a move, on the
// next one (the memory travels in the package); a message without a
// msg_id runs each time.
func TestMessageRunsOnce(t *testing.T) {
	h := startWorker(t)
	conn := h.get("", "", "/").Identity.Conn
	u := "~" + conn
	if _, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: "p", Kind: "k"}}}); err != nil {
		t.Fatal(err)
	}
	epoch := uint64(0)
	send := func(h *host, id string) string {
		t.Helper()
		r, err := h.frame(&protocol.Frame{User: u, Conn: conn, Epoch: epoch, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p", Data: []byte(`{}`), MsgId: id}}})
		if err != nil {
			t.Fatal(err)
		}
		return string(r.GetMessage().GetData())
	}
	if a, b := send(h, "m-1"), send(h, "m-1"); a != "1" || b != "1" {
		t.Fatalf("m-1 twice answered %s and %s, want 1 both times", a, b)
	}
	if a := send(h, "m-2"); a != "2" {
		t.Fatalf("m-2 answered %s", a)
	}
	if a, b := send(h, ""), send(h, ""); a != "3" || b != "4" {
		t.Fatalf("two messages without an id answered %s and %s", a, b)
	}

	env, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: &protocol.Freeze{User: u, Epoch: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	h2 := startApp(t, testApp{}, "w2")
	if _, err := h2.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: &protocol.Wake{
		User: u, Epoch: 2, Package: env.GetFrozen().Package}}}); err != nil {
		t.Fatal(err)
	}
	epoch = 2
	if a := send(h2, "m-2"); a != "2" {
		t.Fatalf("m-2 sent again after the move answered %s, want the first answer, 2", a)
	}
	if a := send(h2, "m-3"); a != "5" {
		t.Fatalf("m-3 on the new worker answered %s, want 5", a)
	}
}

// The memory is bounded: the oldest answers go past maxAnswered.
func TestAnsweredBounded(t *testing.T) {
	var a answered
	for i := range maxAnswered + 10 {
		a.put(strconv.Itoa(i), &protocol.MessageResult{Data: []byte("x")})
	}
	if len(a.order) != maxAnswered || len(a.byID) != maxAnswered {
		t.Fatalf("%d answers held, want %d", len(a.order), maxAnswered)
	}
	if _, ok := a.get("0"); ok {
		t.Fatal("the oldest answer is still held")
	}
	if _, ok := a.get(strconv.Itoa(maxAnswered + 9)); !ok {
		t.Fatal("the newest answer is not held")
	}
	big := make([]byte, maxAnsweredBytes/2+1)
	a.put("big1", &protocol.MessageResult{Data: big})
	a.put("big2", &protocol.MessageResult{Data: big})
	if _, ok := a.get("big1"); ok || a.bytes > maxAnsweredBytes {
		t.Fatalf("past the byte bound: %d bytes held", a.bytes)
	}
}
