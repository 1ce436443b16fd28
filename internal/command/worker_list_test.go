package command

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
	"github.com/stickyd/stickyd/internal/fsm"
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
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/workers": answer(200, workers), "GET /v1/tally": answer(200, fsm.UserTally{})})
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

// rowOf returns the cells of the table row that begins with id.
func rowOf(t *testing.T, out, id string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == id {
			return f
		}
	}
	t.Fatalf("no row for %s:\n%s", id, out)
	return nil
}

// After a drain the maps place people on a worker who are parked there,
// not in its memory yet: worker list counts them as user list does (USERS,
// from the maps' tally) beside those the worker holds (HELD, its probe),
// and says how many wait parked.
func TestWorkerListCountsParkedPeople(t *testing.T) {
	probed := time.Now()
	workers := []host.WorkerInfo{
		{ID: "web-1", Group: "web", State: host.StateReady, Pid: 11, Incarnation: 1, LastProbe: probed, Users: 0, HeapBytes: 3 << 20, Cordoned: true},
		{ID: "web-2", Group: "web", State: host.StateReady, Pid: 12, Incarnation: 1, LastProbe: probed, Users: 2, HeapBytes: 5 << 20},
		{ID: "web-3", Group: "web", State: host.StateReady, Pid: 13, Incarnation: 1, LastProbe: probed, Users: 1, HeapBytes: 4 << 20},
	}
	tally := fsm.UserTally{Users: 7, Workers: map[string]int{"web-2": 5, "web-3": 2}}
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/workers": answer(200, workers), "GET /v1/tally": answer(200, tally)})
	r := run(t, f.args("worker", "list")...)
	r.expect(t, 0, []string{"Parked, not held yet: 4 ("}, nil)
	header := rowOf(t, r.stdout, "ID")
	col := func(name string) int {
		for i, h := range header {
			if h == name {
				return i
			}
		}
		t.Fatalf("no %s column: %v", name, header)
		return -1
	}
	users, held := col("USERS"), col("HELD")
	for _, w := range []struct {
		id          string
		users, held string
	}{{"web-1", "0", "0"}, {"web-2", "5", "2"}, {"web-3", "2", "1"}} {
		row := rowOf(t, r.stdout, w.id)
		// STATE "ready,cordoned" is one cell; the header's columns and
		// the row's line up.
		if row[users] != w.users || row[held] != w.held {
			t.Errorf("%s: USERS %s HELD %s, want %s and %s:\n%s", w.id, row[users], row[held], w.users, w.held, r.stdout)
		}
	}

	// Nobody parked: no note.
	settled := fsm.UserTally{Users: 3, Workers: map[string]int{"web-2": 2, "web-3": 1}}
	f = newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/workers": answer(200, workers), "GET /v1/tally": answer(200, settled)})
	r = run(t, f.args("worker", "list")...)
	r.expect(t, 0, nil, nil)
	if strings.Contains(r.stdout, "Parked") {
		t.Fatalf("a note of parked people with none parked:\n%s", r.stdout)
	}
}

// In-process workers answer their probe with the agent's process's heap,
// RSS and CPU: worker list and monitor say "shared" for them and give the
// process's figures once, while a subprocess worker keeps its own.
func TestSharedProcessFiguresAreSaidOnce(t *testing.T) {
	probed := time.Now()
	workers := []host.WorkerInfo{
		{ID: "demo-1", Group: "demo", State: host.StateReady, SharedProcess: true, Incarnation: 1, LastProbe: probed, Users: 1, HeapBytes: 94 << 20 / 10, RSSBytes: 53 << 20, CPUSeconds: 12.5},
		{ID: "demo-2", Group: "demo", State: host.StateReady, SharedProcess: true, Incarnation: 1, LastProbe: probed, Users: 2, HeapBytes: 94 << 20 / 10, RSSBytes: 53 << 20, CPUSeconds: 12.5},
		{ID: "web-1", Group: "web", State: host.StateReady, Pid: 4242, Incarnation: 1, LastProbe: probed, Users: 3, HeapBytes: 7 << 20, RSSBytes: 20 << 20, CPUSeconds: 1.5},
	}
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/workers": answer(200, workers), "GET /v1/tally": answer(200, fsm.UserTally{})})
	r := run(t, f.args("worker", "list")...)
	r.expect(t, 0, []string{"HEAP shared: in-process workers run inside the agent, whose process's live heap (9.4MiB)"}, nil)
	for id, heap := range map[string]string{"demo-1": "shared", "demo-2": "shared", "web-1": "7.0MiB"} {
		if row := rowOf(t, r.stdout, id); row[len(row)-1] != heap {
			t.Errorf("%s's heap %q, want %q:\n%s", id, row[len(row)-1], heap, r.stdout)
		}
	}

	mw := func(w host.WorkerInfo) client.MonitorWorker {
		return client.MonitorWorker{ID: w.ID, Agent: "a1", Group: w.Group, State: w.State, SharedProcess: w.SharedProcess, Pid: w.Pid, LastProbe: w.LastProbe,
			Users: w.Users, HeapBytes: w.HeapBytes, RSSBytes: w.RSSBytes, CPUSeconds: w.CPUSeconds}
	}
	out := formatView(client.MonitorView{At: probed, Agent: "a1", Workers: []client.MonitorWorker{mw(workers[0]), mw(workers[1]), mw(workers[2])}}, 0)
	for _, id := range []string{"demo-1", "demo-2"} {
		if row := rowOf(t, out, id); strings.Count(strings.Join(row, " "), "shared") != 3 {
			t.Errorf("%s's heap, RSS and CPU not marked shared:\n%s", id, out)
		}
	}
	if row := strings.Join(rowOf(t, out, "web-1"), " "); !strings.Contains(row, "7 MiB 20 MiB 1.5s") || strings.Contains(row, "shared") {
		t.Errorf("web-1's own figures: %s", row)
	}
	if want := "shared: in-process workers run inside the agent a1, whose process's heap 9.4 MiB, RSS 53 MiB and CPU time 12.5s"; !strings.Contains(out, want) {
		t.Errorf("no note %q:\n%s", want, out)
	}
}
