package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Tables: a page subscribes to the tables it shows; when the app changes a
// table (Publish), this worker's subscribed pages get the change first, then
// the host carries it to the other workers with subscribers, and only to
// them. A change reaches a page in its person's mailbox: the page's cached
// values marked with the table are invalidated (a real write: the page gets
// a delta), then the app's OnTableChange runs, if it has one.

// TableWatcher is an optional App interface: OnTableChange runs in the
// person's mailbox for each of their pages subscribed to a changed table,
// after the page's cached values marked with the table were invalidated.
// It may write the page's tree like any handler.
type TableWatcher interface {
	OnTableChange(ctx context.Context, p *Page, c TableChange) error
}

// TableChange is a change of a table, as the app that made it described it.
type TableChange struct {
	Table string
	// Data is what the publisher passed to Publish, as JSON.
	Data json.RawMessage
	// Origin names the worker that published it.
	Origin string
}

var tableRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ErrBadTable is returned for a table name stickyd cannot carry.
var ErrBadTable = errors.New("bad table name: use 1-64 of a-z 0-9 _ . -, starting with a letter or digit")

func checkTables(tables []string) error {
	for _, t := range tables {
		if !tableRE.MatchString(t) {
			return fmt.Errorf("table %q: %w", t, ErrBadTable)
		}
	}
	return nil
}

// Subscribe makes the page receive the changes of tables. Subscriptions
// travel with the page when its person moves.
func (p *Page) Subscribe(tables ...string) error {
	if err := checkTables(tables); err != nil {
		return err
	}
	rt := p.session.rt
	rt.mu.Lock()
	for _, t := range tables {
		if p.tables == nil {
			p.tables = map[string]bool{}
		}
		p.tables[t] = true
		rt.subscribeLocked(t, p)
	}
	rt.mu.Unlock()
	p.changed()
	return nil
}

// Unsubscribe stops the page receiving the changes of tables.
func (p *Page) Unsubscribe(tables ...string) {
	rt := p.session.rt
	rt.mu.Lock()
	for _, t := range tables {
		delete(p.tables, t)
		rt.unsubscribeLocked(t, p)
	}
	rt.mu.Unlock()
	p.changed()
}

// Tables lists the tables the page subscribes to, sorted.
func (p *Page) Tables() []string {
	out := make([]string, 0, len(p.tables))
	for t := range p.tables {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// cachePrefix is where Cached keeps its values in the page tree.
const cachePrefix = "cache/"

// Cached returns the value cached in the page under key, computing and
// caching it if there is none. The value is marked with tables (the page
// subscribes to them): when one of them changes, the value is removed from
// the tree (a delta the page receives like any other), and the next call
// computes it afresh. It lives at "cache/<key>" in the tree, so it is also
// what the page shows; compute must return a JSON-like value.
func (p *Page) Cached(key string, tables []string, compute func() (any, error)) (any, error) {
	if key == "" || strings.Contains(key, "/") {
		return nil, fmt.Errorf("cache key %q: want a non-empty name without /", key)
	}
	path := cachePrefix + key
	if v := p.tree.Get(path); v != nil {
		return v, nil
	}
	if err := p.Subscribe(tables...); err != nil {
		return nil, err
	}
	v, err := compute()
	if err != nil {
		return nil, err
	}
	if err := p.tree.Set(path, v); err != nil {
		return nil, err
	}
	if p.marks == nil {
		p.marks = map[string][]string{}
	}
	p.marks[path] = slices.Clone(tables)
	return p.tree.Get(path), nil
}

// Publish tells every page subscribed to table, on every worker, that the
// app changed it; data (JSON-like, or nil) describes the change. This
// worker's subscribed pages get it first, each in its person's mailbox;
// then the host carries it to the other workers with subscribers. A table
// nobody watches costs nothing. Call it from a handler (ctx is the
// handler's).
func Publish(ctx context.Context, table string, data any) error {
	s := SessionFrom(ctx)
	if s == nil {
		return errors.New("publishing a table change: not in a stickyd handler")
	}
	return s.rt.publish(table, data)
}

func (rt *runtime) publish(table string, data any) error {
	if err := checkTables([]string{table}); err != nil {
		return err
	}
	var raw []byte
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return fmt.Errorf("publishing a change of %q: %w", table, err)
		}
		raw = b
	}
	rt.deliverTable(&protocol.TableChange{Table: table, Data: raw, Origin: rt.workerID})
	if rt.peer == nil {
		return nil
	}
	return rt.peer.Notify(&protocol.Envelope{Body: &protocol.Envelope_Publish{Publish: &protocol.Publish{Table: table, Data: raw, StoreIndex: rt.storeIndex.Load()}}})
}

func (rt *runtime) subscribeLocked(table string, p *Page) {
	if rt.subs == nil {
		rt.subs = map[string]map[*Page]struct{}{}
	}
	if rt.subs[table] == nil {
		rt.subs[table] = map[*Page]struct{}{}
		rt.tablesChanged.Store(true)
	}
	rt.subs[table][p] = struct{}{}
}

func (rt *runtime) unsubscribeLocked(table string, p *Page) {
	delete(rt.subs[table], p)
	if len(rt.subs[table]) == 0 {
		if _, ok := rt.subs[table]; ok {
			rt.tablesChanged.Store(true)
		}
		delete(rt.subs, table)
	}
}

// dropPageLocked removes a page that goes away from the subscriptions.
func (rt *runtime) dropPageLocked(p *Page) {
	for t := range p.tables {
		rt.unsubscribeLocked(t, p)
	}
}

// deliverTable queues a change in the mailbox of every person with a page
// subscribed to its table.
func (rt *runtime) deliverTable(c *protocol.TableChange) {
	// What the publisher committed before publishing is read after this.
	rt.sawStoreIndex(c.StoreIndex)
	rt.mu.Lock()
	users := map[string]bool{}
	for p := range rt.subs[c.Table] {
		users[p.session.userKey()] = true
	}
	for u := range users {
		rt.userLocked(u).enqueue(&protocol.Envelope{Body: &protocol.Envelope_TableChange{TableChange: c}})
	}
	rt.mu.Unlock()
}

// applyTable runs in a person's mailbox: each of their pages subscribed to
// the table drops its cached values marked with it, then hears of it.
func (rt *runtime) applyTable(user string, c *protocol.TableChange) {
	rt.mu.Lock()
	var pages []*Page
	for p := range rt.subs[c.Table] {
		if p.session.userKey() == user {
			pages = append(pages, p)
		}
	}
	rt.mu.Unlock()
	sort.Slice(pages, func(i, j int) bool { return pages[i].id < pages[j].id })
	change := TableChange{Table: c.Table, Data: c.Data, Origin: c.Origin}
	w, _ := rt.app.(TableWatcher)
	for _, p := range pages {
		for path, tables := range p.marks {
			if slices.Contains(tables, c.Table) {
				p.tree.Delete(path)
				delete(p.marks, path)
			}
		}
		if w == nil {
			continue
		}
		ctx := context.WithValue(rt.ctx, sessionKey{}, p.session)
		// The handler's writes reach a waiting pull together, as a
		// message's do.
		err := func() error {
			p.coll.hold()
			defer p.coll.release()
			return w.OnTableChange(ctx, p, change)
		}()
		if err != nil {
			rt.log.Warn("app failed on a table change", "table", c.Table, "page", p.id, "error", err)
		}
	}
}

// syncTables tells the host the worker's set of subscribed tables when it
// changed since the last time. Mailboxes call it side by side: tablesMu
// keeps the reading of the set and its sending together, so an older set
// never reaches the host after a newer one.
func (rt *runtime) syncTables() {
	if !rt.tablesChanged.Load() {
		return
	}
	rt.tablesMu.Lock()
	defer rt.tablesMu.Unlock()
	rt.mu.Lock()
	rt.tablesChanged.Store(false)
	set := make([]string, 0, len(rt.subs))
	for t := range rt.subs {
		set = append(set, t)
	}
	sort.Strings(set)
	same := slices.Equal(set, rt.sentTables)
	if !same {
		rt.sentTables = set
	}
	rt.mu.Unlock()
	if same || rt.peer == nil {
		return
	}
	if err := rt.peer.Notify(&protocol.Envelope{Body: &protocol.Envelope_Tables{Tables: &protocol.Tables{Tables: set}}}); err != nil {
		rt.log.Warn("telling the host the subscribed tables", "error", err)
	}
}

// packMarks and unpackMarks carry a page's cache marks in its package.
func packMarks(m map[string][]string) map[string]*protocol.TableList {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]*protocol.TableList, len(m))
	for path, ts := range m {
		out[path] = &protocol.TableList{Tables: ts}
	}
	return out
}

func unpackMarks(m map[string]*protocol.TableList) map[string][]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string][]string, len(m))
	for path, tl := range m {
		out[path] = tl.GetTables()
	}
	return out
}
