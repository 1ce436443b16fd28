package command

import (
	"net/http"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/governor"
)

func TestEvents(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 4, 5, 0, time.UTC)
	events := []governor.Event{
		{At: at, Kind: governor.KindMove, ID: 1, Group: "web", Worker: "web-3", User: "u-17", To: "web-5",
			Reason: "web-3 over memory 91% > 85%: moving u-17 to web-5"},
		{At: at.Add(time.Second), Kind: governor.KindCompleted, ID: 1, Group: "web", Worker: "web-3", User: "u-17", To: "web-5"},
	}
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/events": answer(200, events)})
	r := run(t, f.args("events")...)
	r.expect(t, 0, []string{"KIND", "REASON", "move", "web-3 over memory 91% > 85%: moving u-17 to web-5", "completed"}, nil)
	if c := f.only(t); c.Method != "GET" || c.Path != "/v1/events" {
		t.Fatalf("called %s %s", c.Method, c.Path)
	}
	r = run(t, f.args("events", "-json")...)
	r.expect(t, 0, []string{`"reason": "web-3 over memory`}, nil)

	empty := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/events": answer(200, []governor.Event{})})
	run(t, empty.args("events")...).expect(t, 0, []string{"No governance events"}, nil)

	broken := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/events": answer(500, map[string]string{"error": "boom"})})
	run(t, broken.args("events")...).expect(t, 1, nil, []string{"listing events: boom"})
}
