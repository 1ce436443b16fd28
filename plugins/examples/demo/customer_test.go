package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// record is customer id as the store holds it, field by field.
func record(id, name, email, notes string, version float64, by string) map[string]any {
	p := customerPath(id) + "/"
	return map[string]any{p + "name": name, p + "email": email, p + "notes": notes, p + "version": version, p + "updated_by": by}
}

// shows reports whether a customer page's tree shows the record given.
func shows(tree map[string]any, id, name string, version float64) bool {
	return tree["id"] == id && tree["name"] == name && tree["version"] == version && tree["error"] == ""
}

// Outside a worker there is no store: the page still opens, subscribed to
// its tables, and says why it shows nothing.
func TestCustomerOpensWithoutStore(t *testing.T) {
	p := openPage(t, New(), kindCustomer)
	tr := p.Tree()
	if tr.String("id") != seedCustomers[0].id || tr.Number("version") != 0 || tr.Number("ticket") != 0 {
		t.Fatalf("tree = %v", tr.Get(""))
	}
	if !strings.Contains(tr.String("error"), "not in a stickyd handler") {
		t.Fatalf("error = %q, want the reason the store could not be read", tr.String("error"))
	}
	if got := p.Tables(); !slices.Equal(got, []string{tableCustomers, tableTickets}) {
		t.Fatalf("tables = %v", got)
	}
}

// A message the page cannot take is refused before the store is touched
// and leaves the tree as it was.
func TestCustomerBadInput(t *testing.T) {
	a := New()
	p := openPage(t, a, kindCustomer)
	for _, c := range []struct {
		msg  string
		want error
	}{
		{`{"op":"save","id":"2","name":"Someone"}`, ErrBadMessage},
		{`{"op":"save","id":"1"}`, ErrBadMessage},
		{`{"op":"save","id":"1","name":"   "}`, ErrBadMessage},
		{`{"op":"save","id":"1","name":"` + strings.Repeat("é", maxNameRunes+1) + `"}`, ErrBadMessage},
		{`{"op":"save","id":"1","name":"two\nlines"}`, ErrBadMessage},
		{`{"op":"save","id":"1","email":"nope"}`, ErrBadMessage},
		{`{"op":"save","id":"1","email":"ada@"}`, ErrBadMessage},
		{`{"op":"save","id":"1","email":"@example.com"}`, ErrBadMessage},
		{`{"op":"save","id":"1","email":"ada lovelace@example.com"}`, ErrBadMessage},
		{`{"op":"save","id":"1","email":"a@b@c"}`, ErrBadMessage},
		{`{"op":"save","id":"1","email":"` + strings.Repeat("a", maxEmailBytes) + `@x"}`, ErrBadMessage},
		{`{"op":"save","id":"1","notes":"` + strings.Repeat("x", maxNotesBytes+1) + `"}`, ErrBadMessage},
		{`{"op":"save","id":"1","nmae":"typo"}`, ErrBadMessage},
		{`{"op":"save","id":1,"name":"Ada"}`, ErrBadMessage},
		{`{"op":"save","id":"1","name":"Ada"} {}`, ErrBadMessage},
		{`{"op":"show"}`, ErrBadMessage},
		{`{"op":"show","id":"01"}`, ErrBadMessage},
		{`{"op":"show","id":"abc"}`, ErrBadMessage},
		{`{"op":"show","id":"1234567890"}`, ErrBadMessage},
		{`{"op":"show","id":"../seq"}`, ErrBadMessage},
		{`{"op":"ticket","n":2}`, ErrBadMessage},
		{`{"op":"edit","title":"x"}`, ErrUnknownOp},
		{`{"op":"filter"}`, ErrUnknownOp},
		{`{"id":"1"}`, ErrBadMessage},
		{`[`, ErrBadMessage},
	} {
		name := c.msg
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			before, deltas := snapshot(t, p), p.PendingDeltas()
			_, err := a.Message(context.Background(), p, json.RawMessage(c.msg))
			if !errors.Is(err, c.want) {
				t.Fatalf("error = %v, want %v", err, c.want)
			}
			if snapshot(t, p) != before || p.PendingDeltas() != deltas {
				t.Error("a refused message changed the tree")
			}
		})
	}
}

// Every build knows the customer page at schema 1, so it crosses releases.
func TestCustomerSchema(t *testing.T) {
	for _, r := range []Release{1, 2} {
		if v, oldest, known := NewRelease(r).Schema(kindCustomer); v != 1 || oldest != 1 || !known {
			t.Errorf("release %d: customer schema = %d, %d, %v; want 1, 1, true", r, v, oldest, known)
		}
	}
}

// Two people on two workers show the same customer: a save by either is in
// the store and on the other's page, without the other asking; a page
// showing another customer is left alone.
func TestCustomerLiveAcrossWorkers(t *testing.T) {
	h := startHost(t, 2)
	ana := h.workers[0].open(t, "ana", kindCustomer)
	bob := h.workers[1].open(t, "bob", kindCustomer)
	carol := h.workers[0].open(t, "carol", kindCustomer)
	for _, tb := range []*testTab{ana, bob, carol} {
		if !shows(tb.tree, "1", "Ada Lambert", 0) {
			t.Fatalf("%s's new page: %v, want the first seed's defaults", tb.user, tb.tree)
		}
	}
	ana.send(`{"op":"show","id":"42"}`, nil)
	bob.send(`{"op":"show","id":"42"}`, nil)
	if !shows(bob.tree, "42", "Thea Dubois", 0) || bob.tree["email"] != "thea@example.com" {
		t.Fatalf("bob shows %v, want customer 42's defaults", bob.tree)
	}

	var ans customerAnswer
	ana.send(`{"op":"save","id":"42","name":"Thea Maria Dubois"}`, &ans)
	if ans != (customerAnswer{ID: "42", Version: 1, Saved: true}) {
		t.Fatalf("answer = %+v", ans)
	}
	if !shows(ana.tree, "42", "Thea Maria Dubois", 1) || ana.tree["updated_by"] != "ana" {
		t.Fatalf("ana's page after her save: %v", ana.tree)
	}
	want := record("42", "Thea Maria Dubois", "thea@example.com", "Always knows where her towel is.", 1, "ana")
	if got := h.get("customers/42"); !reflect.DeepEqual(got, want) {
		t.Fatalf("the store holds %v, want %v", got, want)
	}
	bob.waitFor("ana's save", func(tr map[string]any) bool {
		return shows(tr, "42", "Thea Maria Dubois", 1) && tr["updated_by"] == "ana"
	})

	// Bob saves another field: ana's name stays, ana sees his notes.
	bob.send(`{"op":"save","id":"42","notes":"Lost his towel."}`, &ans)
	if ans.Version != 2 {
		t.Fatalf("bob's save: %+v", ans)
	}
	ana.waitFor("bob's save", func(tr map[string]any) bool {
		return shows(tr, "42", "Thea Maria Dubois", 2) && tr["notes"] == "Lost his towel." && tr["updated_by"] == "bob"
	})

	// A ticket published after the saves reaches carol after them: then
	// she has heard both, and still shows her customer.
	var tk ticketAnswer
	ana.send(`{"op":"ticket"}`, &tk)
	carol.waitFor("the ticket", func(tr map[string]any) bool { return tr["last_ticket"] == tk.Ticket })
	if !shows(carol.tree, "1", "Ada Lambert", 0) {
		t.Fatalf("carol's page of customer 1 changed with customer 42: %v", carol.tree)
	}
}

// A save applies its fields over what the store holds when the grant is
// given, not over what the saver's page showed: a change the page never
// heard of is kept.
func TestCustomerSaveAppliesOverTheMaster(t *testing.T) {
	h := startHost(t, 1)
	ana := h.workers[0].open(t, "ana", kindCustomer)
	ana.send(`{"op":"show","id":"42"}`, nil)
	h.put(record("42", "Thea Dubois", "dubois@example.org", "", 3, "zaphod")) // nobody told

	var ans customerAnswer
	ana.send(`{"op":"save","id":"42","name":"Ford Prefect"}`, &ans)
	if ans.Version != 4 {
		t.Fatalf("answer = %+v, want version 4 (the master's 3, plus one)", ans)
	}
	want := record("42", "Ford Prefect", "dubois@example.org", "", 4, "ana")
	if got := h.get("customers/42"); !reflect.DeepEqual(got, want) {
		t.Fatalf("the store holds %v, want %v", got, want)
	}
	if !shows(ana.tree, "42", "Ford Prefect", 4) || ana.tree["email"] != "dubois@example.org" || ana.tree["notes"] != "" {
		t.Fatalf("ana's page: %v, want the record as saved", ana.tree)
	}
}

// A commit refused because the grant was lost is redone once, from a fresh
// grant over the store as it is then; refused twice, the save fails, says
// so, and writes nothing.
func TestCustomerSaveRetriesAStaleGrantOnce(t *testing.T) {
	h := startHost(t, 1)
	ana := h.workers[0].open(t, "ana", kindCustomer)
	ana.send(`{"op":"show","id":"42"}`, nil)
	h.staleNext(1, func(h *testHost) {
		// While ana's grant was lost, bob saved an email.
		if err := h.putLocked(record("42", "Thea Dubois", "bob@example.com", "", 1, "bob")); err != nil {
			t.Error(err)
		}
	})
	var ans customerAnswer
	ana.send(`{"op":"save","id":"42","name":"Arthur P. Dent"}`, &ans)
	want := record("42", "Arthur P. Dent", "bob@example.com", "", 2, "ana")
	if got := h.get("customers/42"); ans.Version != 2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("after one stale commit: answer %+v, store %v; want version 2 and %v", ans, got, want)
	}

	h.staleNext(2, nil)
	before := snapshotTab(t, ana)
	_, refused := ana.try(`{"op":"save","id":"42","notes":"never written"}`)
	if !strings.Contains(refused, worker.ErrStaleGrant.Error()) {
		t.Fatalf("twice stale: the page was told %q, want %q", refused, worker.ErrStaleGrant)
	}
	if got := h.get("customers/42"); !reflect.DeepEqual(got, want) {
		t.Fatalf("a refused save wrote: %v", got)
	}
	ana.pull(0)
	if snapshotTab(t, ana) != before {
		t.Fatalf("a refused save changed the page: %v", ana.tree)
	}
	ana.send(`{"op":"save","id":"42","notes":"written"}`, &ans)
	if ans.Version != 3 || ana.tree["notes"] != "written" {
		t.Fatalf("the next save: %+v, page %v", ans, ana.tree)
	}
}

// The first save stores a seed customer's defaults even when it changes
// nothing; a save that changes nothing after that writes nothing.
func TestCustomerSaveWithoutChange(t *testing.T) {
	h := startHost(t, 1)
	ana := h.workers[0].open(t, "ana", kindCustomer)
	var ans customerAnswer
	ana.send(`{"op":"save","id":"1","name":"Ada Lambert"}`, &ans)
	if ans != (customerAnswer{ID: "1", Version: 1, Saved: true}) {
		t.Fatalf("first save: %+v", ans)
	}
	ana.send(`{"op":"save","id":"1","name":" Ada Lambert ","email":"ada@example.com"}`, &ans)
	if ans != (customerAnswer{ID: "1", Version: 1, Saved: false}) {
		t.Fatalf("a save that changes nothing: %+v", ans)
	}
	if got := h.get("customers/1/version"); got["customers/1/version"] != 1.0 {
		t.Fatalf("store version %v, want 1", got)
	}
}

// People on two workers taking tickets at once get distinct, consecutive
// numbers; every customer page ends up showing the last one.
func TestTicketsAcrossWorkers(t *testing.T) {
	const each = 10
	h := startHost(t, 2)
	takers := []*testTab{h.workers[0].open(t, "ana", kindCustomer), h.workers[1].open(t, "bob", kindCustomer)}
	watcher := h.workers[1].open(t, "carol", kindCustomer)
	var (
		mu  sync.Mutex
		got []float64
		wg  sync.WaitGroup
	)
	mine := make([]float64, len(takers))
	for i, tb := range takers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				data, refused, err := tb.message(`{"op":"ticket"}`)
				var ans ticketAnswer
				if err == nil && refused == "" {
					err = json.Unmarshal(data, &ans)
				}
				if err != nil || refused != "" {
					t.Errorf("%s taking a ticket: %v %s", tb.user, err, refused)
					return
				}
				mu.Lock()
				got = append(got, ans.Ticket)
				mu.Unlock()
				mine[i] = ans.Ticket
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	slices.Sort(got)
	for i, n := range got {
		if n != float64(i+1) {
			t.Fatalf("tickets %v: want 1..%d, each once", got, 2*each)
		}
	}
	last := float64(2 * each)
	if v := h.get(ticketsPath)[ticketsPath]; v != last {
		t.Fatalf("%s = %v, want %v", ticketsPath, v, last)
	}
	for i, tb := range append(takers, watcher) {
		tb.waitFor(fmt.Sprintf("last ticket %v", last), func(tr map[string]any) bool {
			return tr["last_ticket"] == last && (i >= len(takers) || tr["ticket"] == mine[i])
		})
	}
}

// A page opened before its person signed in follows its customer after:
// the show its script sends when the page goes live again (after the
// login's redirect) subscribes it again.
func TestCustomerFollowsAfterSigningIn(t *testing.T) {
	h := startHost(t, 2)
	bob := &testTab{t: t, w: h.workers[1], user: "~c-bob", conn: "c-bob", page: "p", tree: map[string]any{}}
	bob.frame(&protocol.Frame_Open{Open: &protocol.PageOpen{Page: bob.page, Kind: kindCustomer}})
	bob.pull(0)
	form := url.Values{"user": {"bob"}}.Encode()
	r := bob.frame(&protocol.Frame_Http{Http: &protocol.HTTPRequest{Method: "POST", Url: "/login", Body: []byte(form),
		Headers: []*protocol.Header{{Name: "Content-Type", Values: []string{"application/x-www-form-urlencoded"}}}}})
	if r.GetHttp().GetStatus() != 303 || r.GetIdentity().GetUser() != "bob" {
		t.Fatalf("signing in: %v", r)
	}
	bob.user = "bob"
	bob.send(`{"op":"show","id":"1"}`, nil)

	ana := h.workers[0].open(t, "ana", kindCustomer)
	ana.send(`{"op":"save","id":"1","name":"Ada King"}`, nil)
	bob.waitFor("ana's save", func(tr map[string]any) bool { return shows(tr, "1", "Ada King", 1) })
}

// A change with no data, what a page hears after its person moved, reads
// both the customer and the ticket sequence again.
func TestCustomerRereadsAfterAMove(t *testing.T) {
	h := startHost(t, 2)
	bob := h.workers[1].open(t, "bob", kindCustomer)
	bob.send(`{"op":"show","id":"42"}`, nil)
	h.put(record("42", "Moved Dent", "", "", 5, "ana"))
	h.put(map[string]any{ticketsPath: 7})
	h.tell(h.workers[1], tableCustomers, nil, "")
	h.tell(h.workers[1], tableTickets, nil, "")
	bob.waitFor("the record and the ticket as the store holds them", func(tr map[string]any) bool {
		return shows(tr, "42", "Moved Dent", 5) && tr["last_ticket"] == 7.0
	})
}

// A change announced before this worker's replica has it is read again
// until the replica catches up.
func TestCustomerWaitsForALaggingReplica(t *testing.T) {
	h := startHost(t, 2)
	bob := h.workers[1].open(t, "bob", kindCustomer)
	bob.send(`{"op":"show","id":"42"}`, nil)
	h.lagBehind(2)
	h.put(record("42", "Late Dent", "", "", 1, "ana"))
	h.tell(h.workers[1], tableCustomers, []byte(`{"id":"42","version":1}`), "w1")
	bob.waitFor("the announced version", func(tr map[string]any) bool { return shows(tr, "42", "Late Dent", 1) })
	h.mu.Lock()
	lag := h.lag
	h.mu.Unlock()
	if lag != 0 {
		t.Fatalf("%d stale reads left: the page did not read through the lag", lag)
	}
}

func snapshotTab(t *testing.T, tb *testTab) string {
	t.Helper()
	b, err := json.Marshal(tb.tree)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The customers the navigation links are people of the order table: a
// search for a seed customer's name finds their orders (the grid said "No
// order matches." for every one of them).
func TestSeedCustomersHaveOrders(t *testing.T) {
	d := data()
	for _, s := range seedCustomers {
		res := d.run(query{text: strings.ToLower(s.c.Name), status: -1})
		if res.len() == 0 {
			t.Errorf("customer %s %q has no order", s.id, s.c.Name)
			continue
		}
		if got := d.names[d.name[res.at(0)]]; got != s.c.Name {
			t.Errorf("customer %s %q: the first match is %q's order", s.id, s.c.Name, got)
		}
	}
}
