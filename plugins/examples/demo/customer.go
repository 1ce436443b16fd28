package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stickyd/stickyd/plugins/worker"
)

// The customer page shows one customer record of the global store, live:
// a save made on any worker reaches every page showing that customer, on
// every worker, without a reload. It also hands out numbers of a ticket
// sequence shared by everyone.
//
// The record lives in the global store, one value per field, so a save
// rewrites the fields this build knows and leaves any other alone:
//
//	customers/<id>/name        string
//	customers/<id>/email       string
//	customers/<id>/notes       string
//	customers/<id>/version     number  saves so far
//	customers/<id>/updated_by  string  who saved last
//
// A customer with nothing stored shows its defaults (the seed customers'
// record, blank for any other id) at version 0; the first save stores it.
//
// The page's tree:
//
//	id           string  the customer shown, 1-9 digits
//	name, email, notes, updated_by  string  the record
//	version      number  0 while nothing is stored: the defaults show
//	error        string  why the last read of the store failed; "" if it did not
//	ticket       number  the last ticket this page took, 0 before any
//	last_ticket  number  the last ticket anyone took, as the page last heard
//
// Messages:
//
//   - {"op":"show", "id"} shows customer id, read afresh from the store;
//     answers {"id", "version"}.
//   - {"op":"save", "id", "name"?, "email"?, "notes"?} writes the fields it
//     gives over the master's current record, under a grant, and publishes
//     the change (table customers). "id" must be the customer shown. A save
//     that changes nothing writes nothing. Answers {"id", "version",
//     "saved"}.
//   - {"op":"ticket"} takes the next number of the shared sequence and
//     publishes it (table tickets); answers {"ticket"}.
//
// An answer's "warning" says that the store was written but the other
// pages could not be told.
//
// The page follows both tables (OnTableChange): a change of the customer it
// shows, or one with no data (its person moved, and a change may have
// happened on the way), reads the record again; a ticket updates
// last_ticket.
const (
	maxNameRunes  = 100
	maxEmailBytes = 254
	maxNotesBytes = 4 << 10
	// storeLagWait bounds how long a page waits for this worker's replica
	// of the store to catch up with a change announced by another worker
	// (the change can travel faster than the replication).
	storeLagWait = 500 * time.Millisecond
)

// customerIDRE is a customer id: 1-9 digits, no leading zero.
var customerIDRE = regexp.MustCompile(`^[1-9][0-9]{0,8}$`)

// customer is a customer record.
type customer struct {
	Name      string
	Email     string
	Notes     string
	Version   float64
	UpdatedBy string
}

// seedCustomers are the customers the demo knows before anyone saves one;
// the first is what a new customer page shows.
var seedCustomers = []struct {
	id string
	c  customer
}{
	{"1", customer{Name: "Ada Lambert", Email: "ada@example.com", Notes: "Pays on time. Prefers email."}},
	{"2", customer{Name: "Greta Holm", Email: "greta@example.com", Notes: "Wants invoices in triplicate."}},
	{"3", customer{Name: "Alan Tanaka", Email: "alan@example.com"}},
	{"42", customer{Name: "Thea Dubois", Email: "thea@example.com", Notes: "Always knows where her towel is."}},
}

// defaultCustomer is what customer id is before its first save.
func defaultCustomer(id string) customer {
	for _, s := range seedCustomers {
		if s.id == id {
			return s.c
		}
	}
	return customer{}
}

func customerPath(id string) string { return "customers/" + id }

// decodeCustomer reads customer id from the store's values at or under its
// path; with nothing stored, it is the defaults and stored is false.
// Fields this build does not know are ignored.
func decodeCustomer(id string, vals map[string]json.RawMessage) (c customer, stored bool, err error) {
	prefix := customerPath(id) + "/"
	for path, raw := range vals {
		field, ok := strings.CutPrefix(path, prefix)
		if !ok {
			continue
		}
		stored = true
		var err error
		switch field {
		case "name":
			err = json.Unmarshal(raw, &c.Name)
		case "email":
			err = json.Unmarshal(raw, &c.Email)
		case "notes":
			err = json.Unmarshal(raw, &c.Notes)
		case "version":
			err = json.Unmarshal(raw, &c.Version)
		case "updated_by":
			err = json.Unmarshal(raw, &c.UpdatedBy)
		}
		if err != nil {
			return customer{}, false, fmt.Errorf("reading customer %s: %s holds %s: %w", id, path, raw, err)
		}
	}
	if !stored {
		return defaultCustomer(id), false, nil
	}
	return c, true, nil
}

// writes are the store writes that make c the record of customer id.
func (c customer) writes(id string) map[string]any {
	p := customerPath(id) + "/"
	return map[string]any{
		p + "name": c.Name, p + "email": c.Email, p + "notes": c.Notes,
		p + "version": c.Version, p + "updated_by": c.UpdatedBy,
	}
}

// customerAnswer answers show and save.
type customerAnswer struct {
	ID      string  `json:"id"`
	Version float64 `json:"version"`
	// Saved is false for a save that changed nothing (and for show).
	Saved   bool   `json:"saved"`
	Warning string `json:"warning,omitempty"`
}

// ticketAnswer answers ticket.
type ticketAnswer struct {
	Ticket  float64 `json:"ticket"`
	Warning string  `json:"warning,omitempty"`
}

// openCustomer subscribes a new customer page to the tables it follows and
// shows the first seed customer. A store that cannot be read does not stop
// the page opening: the page shows why (error) and the defaults.
func (a *App) openCustomer(ctx context.Context, p *worker.Page) error {
	if err := p.Subscribe(tableCustomers, tableTickets); err != nil {
		return fmt.Errorf("opening a customer page: %w", err)
	}
	t := p.Tree()
	for _, w := range []struct {
		path string
		v    any
	}{{"ticket", 0.0}, {"last_ticket", 0.0}} {
		if err := setChanged(t, w.path, w.v); err != nil {
			return fmt.Errorf("opening a customer page: %w", err)
		}
	}
	if err := a.showCustomer(ctx, p, seedCustomers[0].id); err != nil {
		a.log.Warn("opening a customer page without the store", "error", err)
	}
	return nil
}

// showCustomer reads customer id and the ticket sequence and shows them.
// On a failed read, the tree shows id with blank fields and the error.
func (a *App) showCustomer(ctx context.Context, p *worker.Page, id string) error {
	t := p.Tree()
	vals, err := read(ctx, customerPath(id), ticketsPath)
	var c customer
	if err == nil {
		c, _, err = decodeCustomer(id, vals)
	}
	if err != nil {
		err = fmt.Errorf("reading customer %s: %w", id, err)
		if werr := writeCustomer(t, id, customer{}, err.Error()); werr != nil {
			return werr
		}
		return err
	}
	if err := writeCustomer(t, id, c, ""); err != nil {
		return err
	}
	if last, err := lastTicket(vals); err == nil && last > t.Number("last_ticket") {
		return t.Set("last_ticket", last)
	}
	return nil
}

// refreshCustomer reads the customer the page shows again, after a change
// announced at version atLeast (0: unknown). This worker's replica of the
// store may not have the change yet; it is read again, for a short while,
// until it has.
func (a *App) refreshCustomer(ctx context.Context, p *worker.Page, atLeast float64) error {
	t := p.Tree()
	id := t.String("id")
	deadline := time.Now().Add(storeLagWait)
	for {
		vals, err := read(ctx, customerPath(id))
		var c customer
		if err == nil {
			c, _, err = decodeCustomer(id, vals)
		}
		if err != nil {
			err = fmt.Errorf("reading customer %s again: %w", id, err)
			if werr := setChanged(t, "error", err.Error()); werr != nil {
				return werr
			}
			return err
		}
		if c.Version >= atLeast || time.Now().After(deadline) {
			return writeCustomer(t, id, c, "")
		}
		select {
		case <-time.After(25 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// writeCustomer puts customer id in the page's tree, writing only what
// changed.
func writeCustomer(t *worker.Tree, id string, c customer, errText string) error {
	for _, w := range []struct {
		path string
		v    any
	}{
		{"id", id}, {"name", c.Name}, {"email", c.Email}, {"notes", c.Notes},
		{"version", c.Version}, {"updated_by", c.UpdatedBy}, {"error", errText},
	} {
		if err := setChanged(t, w.path, w.v); err != nil {
			return fmt.Errorf("showing customer %s: %w", id, err)
		}
	}
	return nil
}

type showMsg struct {
	Op string `json:"op"`
	ID string `json:"id"`
}

type saveMsg struct {
	Op    string  `json:"op"`
	ID    string  `json:"id"`
	Name  *string `json:"name"`
	Email *string `json:"email"`
	Notes *string `json:"notes"`
}

func (a *App) customerMessage(ctx context.Context, p *worker.Page, raw json.RawMessage) (any, error) {
	op, err := readOp(raw)
	if err != nil {
		return nil, err
	}
	// Subscribing a subscribed page again changes nothing. It restores the
	// subscriptions of a page whose connection logged in since it opened:
	// the SDK keeps such a page but drops it from its tables' subscribers
	// (Session login re-keys the connection). customer.js sends show each
	// time its page goes live, which is right after a login's redirect.
	if err := p.Subscribe(tableCustomers, tableTickets); err != nil {
		return nil, err
	}
	switch op {
	case "show":
		var m showMsg
		if err := decodeOp(op, raw, &m); err != nil {
			return nil, err
		}
		if !customerIDRE.MatchString(m.ID) {
			return nil, badf("showing a customer", "id %q is not 1-9 digits", m.ID)
		}
		if err := a.showCustomer(ctx, p, m.ID); err != nil {
			return nil, err
		}
		return customerAnswer{ID: m.ID, Version: p.Tree().Number("version")}, nil
	case "save":
		var m saveMsg
		if err := decodeOp(op, raw, &m); err != nil {
			return nil, err
		}
		return a.saveCustomer(ctx, p, m)
	case "ticket":
		if err := decodeOp(op, raw, &struct {
			Op string `json:"op"`
		}{}); err != nil {
			return nil, err
		}
		return a.ticket(ctx, p)
	}
	return nil, unknownOp(kindCustomer, op, "show", "save", "ticket")
}

// edit checks a save's fields and applies them to c.
func (m saveMsg) edit(c customer) (customer, error) {
	const doing = "saving the customer"
	if m.Name == nil && m.Email == nil && m.Notes == nil {
		return c, badf(doing, "give a name, an email, notes, or some of them")
	}
	if m.Name != nil {
		name := strings.TrimSpace(*m.Name)
		switch n := utf8.RuneCountInString(name); {
		case n == 0:
			return c, badf(doing, "the name is empty")
		case n > maxNameRunes:
			return c, badf(doing, "the name has %d characters, at most %d", n, maxNameRunes)
		case strings.ContainsFunc(name, unicode.IsControl):
			return c, badf(doing, "the name holds a control character")
		}
		c.Name = name
	}
	if m.Email != nil {
		email := strings.TrimSpace(*m.Email)
		if len(email) > maxEmailBytes {
			return c, badf(doing, "the email has %d bytes, at most %d", len(email), maxEmailBytes)
		}
		local, domain, ok := strings.Cut(email, "@")
		if email != "" && (!ok || local == "" || domain == "" || strings.ContainsAny(domain, "@") ||
			strings.ContainsFunc(email, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })) {
			return c, badf(doing, "%q is not an email address", email)
		}
		c.Email = email
	}
	if m.Notes != nil {
		if n := len(*m.Notes); n > maxNotesBytes {
			return c, badf(doing, "the notes have %d bytes, at most %d", n, maxNotesBytes)
		}
		c.Notes = *m.Notes
	}
	return c, nil
}

// saveCustomer writes a save over the master's current record, under a
// grant on the customer: fields the message does not give keep what the
// master holds, so two people editing different fields both keep theirs.
// Then every page is told (table customers).
func (a *App) saveCustomer(ctx context.Context, p *worker.Page, m saveMsg) (any, error) {
	t := p.Tree()
	if shown := t.String("id"); m.ID != shown {
		return nil, badf("saving the customer", "the page shows customer %q, not %q", shown, m.ID)
	}
	// Checked once before the grant, so a bad save holds nothing.
	if _, err := m.edit(customer{}); err != nil {
		return nil, err
	}
	by := p.Session().User()
	if by == "" {
		by = "anonymous"
	}
	var saved customer
	wrote, err := underGrant(ctx, []string{customerPath(m.ID)}, func(master map[string]json.RawMessage) (map[string]any, error) {
		cur, stored, err := decodeCustomer(m.ID, master)
		if err != nil {
			return nil, err
		}
		next, err := m.edit(cur)
		if err != nil {
			return nil, err
		}
		if stored && next == cur {
			saved = cur
			return nil, nil // nothing changed
		}
		next.Version = cur.Version + 1
		next.UpdatedBy = by
		saved = next
		return next.writes(m.ID), nil
	})
	if err != nil {
		return nil, fmt.Errorf("saving customer %s: %w", m.ID, err)
	}
	if err := writeCustomer(t, m.ID, saved, ""); err != nil {
		return nil, err
	}
	ans := customerAnswer{ID: m.ID, Version: saved.Version, Saved: wrote}
	if wrote {
		if err := worker.Publish(ctx, tableCustomers, map[string]any{"id": m.ID, "version": saved.Version}); err != nil {
			a.log.Warn("telling the pages of a customer save", "customer", m.ID, "error", err)
			ans.Warning = "saved, but the other pages were not told: " + err.Error()
		}
	}
	return ans, nil
}

// ticket takes the next ticket number for the page and tells every page
// (table tickets).
func (a *App) ticket(ctx context.Context, p *worker.Page) (any, error) {
	n, err := takeTicket(ctx)
	if err != nil {
		return nil, err
	}
	t := p.Tree()
	if err := t.Set("ticket", n); err != nil {
		return nil, err
	}
	if n > t.Number("last_ticket") {
		if err := t.Set("last_ticket", n); err != nil {
			return nil, err
		}
	}
	ans := ticketAnswer{Ticket: n}
	if err := worker.Publish(ctx, tableTickets, map[string]any{"last": n}); err != nil {
		a.log.Warn("telling the pages of a ticket", "ticket", n, "error", err)
		ans.Warning = fmt.Sprintf("ticket %v is yours, but the other pages were not told: %v", n, err)
	}
	return ans, nil
}

var _ worker.TableWatcher = (*App)(nil)

// OnTableChange keeps customer pages live: a save of the customer a page
// shows, or a change with no data (the person moved, and may have missed
// changes on the way), reads the record again; a ticket handed out anywhere
// updates last_ticket. It runs in the person's mailbox.
func (a *App) OnTableChange(ctx context.Context, p *worker.Page, c worker.TableChange) error {
	if p.Kind() != kindCustomer {
		return nil
	}
	t := p.Tree()
	switch c.Table {
	case tableCustomers:
		if len(c.Data) == 0 {
			return a.refreshCustomer(ctx, p, 0)
		}
		var ch struct {
			ID      string  `json:"id"`
			Version float64 `json:"version"`
		}
		if err := json.Unmarshal(c.Data, &ch); err != nil {
			return fmt.Errorf("reading a change of %s: %w", c.Table, err)
		}
		// A version the page shows already (its own save) needs no read:
		// versions only grow, one save at a time under the grant.
		if ch.ID != t.String("id") || (ch.Version > 0 && ch.Version <= t.Number("version")) {
			return nil
		}
		return a.refreshCustomer(ctx, p, ch.Version)
	case tableTickets:
		var last float64
		if len(c.Data) == 0 {
			vals, err := read(ctx, ticketsPath)
			if err == nil {
				last, err = lastTicket(vals)
			}
			if err != nil {
				return fmt.Errorf("reading the last ticket: %w", err)
			}
		} else {
			var ch struct {
				Last float64 `json:"last"`
			}
			if err := json.Unmarshal(c.Data, &ch); err != nil {
				return fmt.Errorf("reading a change of %s: %w", c.Table, err)
			}
			last = ch.Last
		}
		if last > t.Number("last_ticket") {
			return t.Set("last_ticket", last)
		}
	}
	return nil
}
