package browser

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stickyd/stickyd/internal/agent"
)

// emptyInput empties an input as a person selecting its text and deleting it
// would. (chromedp.Clear sets the value attribute, which no longer shows
// once the input was typed in or set by script.)
func (tb *tab) emptyInput(id string) {
	tb.t.Helper()
	js := fmt.Sprintf(`(() => { const el = document.getElementById(%q); el.value = ""; el.dispatchEvent(new Event("input", {bubbles: true})); return true; })()`, id)
	if _, err := eval[bool](tb, js); err != nil {
		tb.t.Fatalf("tab %s: clearing #%s: %v", tb.name, id, err)
	}
}

// customerView is what a customer page shows, read from its DOM.
type customerView struct {
	Status   string `json:"status"`   // #s-customer-status
	Worker   string `json:"worker"`   // #s-customer-worker: the worker holding the page
	User     string `json:"user"`     // who the HTML was rendered for
	Heading  string `json:"heading"`  // #c-heading: the name as stored
	Name     string `json:"name"`     // the inputs' values
	Email    string `json:"email"`    //
	Notes    string `json:"notes"`    //
	Version  string `json:"version"`  // #c-version
	Error    string `json:"error"`    // #c-error while shown
	Mine     string `json:"mine"`     // #t-mine: "#12" or "none yet"
	Last     string `json:"last"`     // #t-last
	TicketEr string `json:"ticketEr"` // #t-error while shown
	Notice   string `json:"notice"`
	// Marked is true while the document the test marked is still the one
	// shown: false after any reload or navigation.
	Marked bool `json:"marked"`
}

const customerViewJS = `(() => {
  const $ = (id) => document.getElementById(id);
  const text = (id) => $(id) ? $(id).textContent : "";
  const shown = (id) => $(id) && !$(id).hidden ? $(id).textContent : "";
  const value = (id) => $(id) ? $(id).value : "";
  return {
    status: text("s-customer-status"), worker: text("s-customer-worker"), user: document.body.dataset.user || "",
    heading: text("c-heading"), name: value("c-name"), email: value("c-email"), notes: value("c-notes"),
    version: text("c-version"), error: shown("c-error"), mine: text("t-mine"), last: text("t-last"),
    ticketEr: shown("t-error"), notice: shown("notice"), marked: window.__stickydTestMark === true,
  };
})()`

func (v customerView) String() string {
	return fmt.Sprintf("%s on %q as %q: heading %q, inputs %q/%q/%q, %q, error %q; tickets mine %q last %q error %q; notice %q, marked %v",
		v.Status, v.Worker, v.User, v.Heading, v.Name, v.Email, v.Notes, v.Version, v.Error, v.Mine, v.Last, v.TicketEr, v.Notice, v.Marked)
}

// ticket is the number a ticket label shows ("#12"), or -1.
func ticket(label string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(label, "#"))
	if err != nil || !strings.HasPrefix(label, "#") {
		return -1
	}
	return n
}

// waitCustomer polls the customer page until cond holds and returns what it
// saw then; at the deadline it fails with the last view.
func (tb *tab) waitCustomer(what string, timeout time.Duration, cond func(v customerView) bool) customerView {
	tb.t.Helper()
	deadline := time.Now().Add(timeout)
	var last customerView
	var lastErr error
	for {
		v, err := eval[customerView](tb, customerViewJS)
		if err == nil && cond(v) {
			return v
		}
		if err == nil {
			last = v
		}
		lastErr = err
		if time.Now().After(deadline) {
			tb.t.Fatalf("tab %s: timed out after %v waiting for %s;\nlast view: %s\nlast error: %v", tb.name, timeout, what, last, lastErr)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-tb.ctx.Done():
			tb.t.Fatalf("tab %s: waiting for %s: browser gone: %v", tb.name, what, tb.ctx.Err())
		}
	}
}

// moveApart waits until the supervisor knows where each user lives, then
// moves the second, with their pages open, to a worker that is neither
// theirs nor the first user's; it returns the two users' workers.
func moveApart(t *testing.T, a *agent.Agent, first, second string) (string, string) {
	t.Helper()
	where := func(user string) string {
		deadline := time.Now().Add(settle)
		for {
			if u, ok := a.Supervisor().User(user); ok && u.Worker != "" && u.MovingTo == "" {
				return u.Worker
			}
			if time.Now().After(deadline) {
				t.Fatalf("the supervisor does not place %s", user)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	w1, w2 := where(first), where(second)
	for _, w := range a.Pool().Ready() {
		if w == w1 || w == w2 {
			continue
		}
		if _, err := a.Supervisor().Move(t.Context(), second, w, "test"); err != nil {
			t.Fatalf("moving %s from %s to %s: %v", second, w2, w, err)
		}
		t.Logf("%s lives on %s; %s moved from %s to %s", first, w1, second, w2, w)
		return w1, w
	}
	t.Fatalf("no ready worker other than %s and %s in %v", w1, w2, a.Pool().Ready())
	return "", ""
}

// Two people, each in their own browser context and signed in, on two
// different workers, open the same customer. One renames it in the form:
// the other's page shows the new name without a reload (the global store,
// then a table change carried to the other worker). The other saves an
// email: the first sees it, and the name stays. Both take tickets, one
// after the other and then at once: distinct, consecutive numbers, and both
// pages end up showing the last one issued.
func TestCustomerLiveAcrossWorkers(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			a := startAgent(t, mode, 3)
			ana := startBrowser(t, "ana")
			bob := ana.newPerson("bob")
			url := "http://" + a.Addr() + "/customers/42"
			const seedName = "Thea Dubois"

			// 1. Each opens customer 42 and signs in with the page's form,
			// which brings them back to it.
			for _, tb := range []*tab{ana, bob} {
				tb.do("loading customer 42", chromedp.Navigate(url))
				tb.waitCustomer("the customer page to go live", firstLoad, func(v customerView) bool {
					return v.Status == "live" && v.Heading == seedName && workerID.MatchString(v.Worker)
				})
				tb.do("signing in", chromedp.SendKeys(chromedp.ID("login-user"), tb.name), chromedp.Submit(chromedp.ID("login-user")))
				tb.waitCustomer("signed in, customer 42 live again", settle, func(v customerView) bool {
					return v.User == tb.name && v.Status == "live" && v.Heading == seedName && v.Error == ""
				})
			}

			// 2. They live on different workers: bob is moved, with his
			// page open, to a third one. His page goes on there (it says
			// so once an answer comes from there: step 3).
			anaWorker, bobWorker := moveApart(t, a, "ana", "bob")
			ana.waitCustomer("ana's page on "+anaWorker, settle, func(v customerView) bool {
				return v.Status == "live" && v.Worker == anaWorker
			})
			if _, err := eval[bool](bob, "window.__stickydTestMark = true"); err != nil {
				t.Fatalf("marking bob's document: %v", err)
			}
			before := bob.waitCustomer("bob's page, live and marked", settle, func(v customerView) bool {
				return v.Status == "live" && v.Heading == seedName && v.Marked
			})

			// 3. Ana renames the customer in the form and saves.
			const newName = "Thea Maria Dubois"
			ana.emptyInput("c-name")
			ana.do("renaming the customer",
				chromedp.SendKeys(chromedp.ID("c-name"), newName),
				chromedp.Click(chromedp.ID("c-save")),
			)
			ana.waitCustomer("ana's save to be stored", settle, func(v customerView) bool {
				return v.Heading == newName && v.Name == newName && strings.HasPrefix(v.Version, "version 1,") && v.Error == ""
			})
			after := bob.waitCustomer("ana's new name on bob's page, from "+bobWorker, settle, func(v customerView) bool {
				return v.Heading == newName && v.Name == newName && strings.Contains(v.Version, "saved by ana") && v.Worker == bobWorker
			})
			if !after.Marked {
				t.Fatalf("bob's page was reloaded to see the change:\nbefore: %s\nafter:  %s", before, after)
			}

			// 4. Bob saves an email: ana sees it, and her name stays.
			const email = "arthur@heart-of-gold.example"
			bob.emptyInput("c-email")
			bob.do("changing the email",
				chromedp.SendKeys(chromedp.ID("c-email"), email),
				chromedp.Click(chromedp.ID("c-save")),
			)
			ana.waitCustomer("bob's email on ana's page", settle, func(v customerView) bool {
				return v.Email == email && v.Heading == newName && strings.Contains(v.Version, "version 2, saved by bob")
			})

			// 5. Tickets, one after the other: consecutive.
			ana.do("taking a ticket", chromedp.Click(chromedp.ID("t-take")))
			n := ticket(ana.waitCustomer("ana's ticket", settle, func(v customerView) bool { return ticket(v.Mine) > 0 }).Mine)
			bob.do("taking a ticket", chromedp.Click(chromedp.ID("t-take")))
			bob.waitCustomer(fmt.Sprintf("bob's ticket #%d", n+1), settle, func(v customerView) bool { return ticket(v.Mine) == n+1 })
			ana.waitCustomer(fmt.Sprintf("last ticket #%d on ana's page", n+1), settle, func(v customerView) bool {
				return ticket(v.Last) == n+1 && ticket(v.Mine) == n
			})

			// 6. Both at once: two distinct numbers, the next two.
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			for _, tb := range []*tab{ana, bob} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
					defer cancel()
					if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("t-take"))); err != nil {
						errs <- fmt.Errorf("tab %s: taking a ticket: %w", tb.name, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			var got []int
			for _, tb := range []*tab{ana, bob} {
				v := tb.waitCustomer("a second ticket", settle, func(v customerView) bool {
					return ticket(v.Mine) > n+1 && ticket(v.Last) == n+3 && v.TicketEr == ""
				})
				got = append(got, ticket(v.Mine))
			}
			slices.Sort(got)
			if !slices.Equal(got, []int{n + 2, n + 3}) {
				t.Fatalf("tickets taken at once: %v, want %d and %d", got, n+2, n+3)
			}
		})
	}
}
