package governor

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// t0 is the fake clock's origin; tests advance time by hand.
var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

const gib = 1 << 30

// newEngine returns an engine governing group "web" by p, seeded.
func newEngine(t testing.TB, p Policy, seed uint64) *Engine {
	t.Helper()
	e, err := New(map[string]Policy{"web": p}, rand.New(rand.NewPCG(seed, 0x5eed)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// reading is a reading of worker w of group "web" at at: cpu in cores,
// mem as a fraction of 1 GiB, holding the users of per.
func reading(w string, at time.Time, cpu, mem float64, per map[string]Usage) Reading {
	return Reading{
		Worker: w, Group: "web", At: at,
		CPU: cpu, RSS: uint64(mem * gib),
		Users: len(per), Pages: len(per), PerUser: per,
	}
}

// users returns n users named prefix-0 … prefix-(n-1), each with usage u.
func users(prefix string, n int, u Usage) map[string]Usage {
	m := make(map[string]Usage, n)
	for i := range n {
		m[fmt.Sprintf("%s-%d", prefix, i)] = u
	}
	return m
}

// ofKind keeps the decisions of kind k.
func ofKind(ds []Decision, k Kind) []Decision {
	var out []Decision
	for _, d := range ds {
		if d.Kind == k {
			out = append(out, d)
		}
	}
	return out
}

// doneAll reports every decision as carried out at now.
func doneAll(e *Engine, ds []Decision, now time.Time) {
	for _, d := range ds {
		e.Done(d, true, now)
	}
}

// eventsOf keeps the events of kind k.
func eventsOf(e *Engine, k Kind) []Event {
	var out []Event
	for _, ev := range e.Events() {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

// kinds lists the kinds of ds, for failure messages.
func kinds(ds []Decision) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%s(%s→%s %s)", d.Kind, d.Worker, d.To, d.User))
	}
	return "[" + strings.Join(s, " ") + "]"
}
