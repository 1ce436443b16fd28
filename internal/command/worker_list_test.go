package command

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/host"
)

// A relaunched worker's list shows how its predecessors ended, by
// incarnation, and why a slot cannot start now.
func TestWorkerListShowsHowPredecessorsEnded(t *testing.T) {
	born := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	died := born.Add(time.Hour)
	silence := "killed for silence: 3 probes unanswered"
	workers := []host.WorkerInfo{
		{ID: "web-1", Group: "web", State: host.StateReady, Incarnation: 3, Born: died.Add(time.Minute), DiedAt: died.Add(time.Second), HowDied: "exited: signal: killed",
			Ends: []host.End{
				{Incarnation: 1, Born: born, DiedAt: died, How: silence},
				{Incarnation: 2, Born: died, DiedAt: died.Add(time.Second), How: "exited: signal: killed"},
			}},
		{ID: "web-2", Group: "web", State: host.StateDead, Incarnation: 1, DiedAt: died, HowDied: silence,
			Ends:        []host.End{{Incarnation: 1, Born: born, DiedAt: died, How: silence}},
			LaunchError: "launch failed: no room on the host"},
	}
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/workers": answer(200, workers)})
	r := run(t, f.args("worker", "list")...)
	r.expect(t, 0, nil, nil)
	_, ends, ok := strings.Cut(r.stdout, "\nLast ends:\n")
	if !ok {
		t.Fatalf("no ends:\n%s", r.stdout)
	}
	stamp := func(t time.Time) string { return t.Local().Format(time.RFC3339) }
	want := []string{
		"web-1 #1 at " + stamp(died) + ": " + silence + "; relaunched as #3",
		"web-1 #2 at " + stamp(died.Add(time.Second)) + ": exited: signal: killed; relaunched as #3",
		"web-2 #1 at " + stamp(died) + ": " + silence,
		"web-2 cannot start: launch failed: no room on the host",
	}
	got := strings.Split(strings.TrimSpace(ends), "\n")
	if len(got) != len(want) {
		t.Fatalf("ends:\n%s\nwant:\n%s", ends, strings.Join(want, "\n"))
	}
	for i := range want {
		if strings.TrimSpace(got[i]) != want[i] {
			t.Errorf("end %d = %q, want %q", i, strings.TrimSpace(got[i]), want[i])
		}
	}
}
