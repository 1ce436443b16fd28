package e2e

import (
	"encoding/json"
	"strconv"
	"syscall"
	"testing"
)

// A message whose answer was lost (the connection dropped as the agent
// stopped) is sent again with its msg_id after the restart, as client.js
// does, and is answered from the page's memory: it ran once. Through
// SIGTERM restarts (the page parked and woken with its memory), each
// message sent twice, the counter counts each once.
func TestMessagesRunOnceThroughRestarts(t *testing.T) {
	waits(t)
	const restarts = 4
	p := newProc(t, 2)
	p.start()
	b := procBrowser(t, p)
	if code, body := b.do("POST", "/login?user=once"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	tb := b.openTab("once")
	count := func(a answer) int {
		var v struct {
			Count int `json:"count"`
		}
		if a.Op != "reply" || json.Unmarshal(a.Data, &v) != nil {
			t.Fatalf("an inc answered %+v", a)
		}
		return v.Count
	}
	inc := func(id string) int {
		return count(tb.op(map[string]any{"op": "msg", "msg_id": id, "data": map[string]any{"op": "inc"}}))
	}
	want := 0
	for r := range restarts {
		id := "m-" + strconv.Itoa(r)
		want++
		if got := inc(id); got != want {
			t.Fatalf("restart %d: %s answered %d, want %d", r, id, got, want)
		}
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("restart %d: agent exit: %v\n%s", r, err, p.out)
		}
		tb.ws.Close()
		p.start()
		tb.connect()
		// The same message again: its answer, not a second run.
		if got := inc(id); got != want {
			t.Fatalf("restart %d: %s sent again after the restart answered %d, want %d (it ran twice)", r, id, got, want)
		}
	}
	want++
	if got := inc("last"); got != want {
		t.Fatalf("a new message answered %d, want %d", got, want)
	}
}
