package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// tableApp subscribes, publishes and caches on demand; it records every
// change it hears in the page tree.
type tableApp struct{ testApp }

func (tableApp) Message(ctx context.Context, p *Page, raw json.RawMessage) (any, error) {
	var m struct {
		Op, Table, Key string
		V              any
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	switch m.Op {
	case "sub":
		return nil, p.Subscribe(m.Table)
	case "pub":
		return nil, Publish(ctx, m.Table, m.V)
	case "cache":
		return p.Cached(m.Key, []string{m.Table}, func() (any, error) { return m.V, nil })
	}
	return nil, nil
}

func (tableApp) OnTableChange(ctx context.Context, p *Page, c TableChange) error {
	n := p.Tree().Number("heard/" + c.Table)
	return p.Tree().Set("heard/"+c.Table, n+1)
}

// startNoticedApp serves app on a pipe; the host's side collects what the
// worker tells it unasked.
func startNoticedApp(t *testing.T, app App) (*host, *notices) {
	h, w := channel.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ServeConn(ctx, app, Options{Name: "tables"}, w)
	}()
	if _, err := channel.Accept(t.Context(), h, &protocol.HelloAck{WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	got := &notices{}
	hs := &host{t: t, done: done}
	hs.peer = channel.NewPeer(h, got.add)
	t.Cleanup(func() { cancel(); hs.peer.Close(); <-done })
	return hs, got
}

// notices collects what a worker tells its host unasked.
type notices struct {
	mu   sync.Mutex
	envs []*protocol.Envelope
}

func (n *notices) add(env *protocol.Envelope) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.envs = append(n.envs, env)
}

func (n *notices) last(kind string) *protocol.Envelope {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := len(n.envs) - 1; i >= 0; i-- {
		switch n.envs[i].Body.(type) {
		case *protocol.Envelope_Tables:
			if kind == "tables" {
				return n.envs[i]
			}
		case *protocol.Envelope_Publish:
			if kind == "publish" {
				return n.envs[i]
			}
		}
	}
	return nil
}

func TestTablesReachSubscribedPagesOnly(t *testing.T) {
	hs, got := startNoticedApp(t, tableApp{})

	type person struct {
		user, conn string
		after      *uint64
	}
	open := func() person {
		conn := hs.get("", "", "/").Identity.Conn
		p := person{"~" + conn, conn, new(uint64)}
		if _, err := hs.frame(&protocol.Frame{User: p.user, Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: "p", Kind: "k"}}}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	msg := func(p person, m string) *protocol.FrameReply {
		r, err := hs.frame(&protocol.Frame{User: p.user, Conn: p.conn, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p", Data: []byte(m)}}})
		if err != nil || r.GetMessage().GetError() != "" {
			t.Fatalf("message %s: %v %v", m, err, r)
		}
		return r
	}
	pull := func(p person) map[string]string {
		r, err := hs.frame(&protocol.Frame{User: p.user, Conn: p.conn, Kind: &protocol.Frame_Pull{Pull: &protocol.PagePull{Page: "p", After: *p.after}}})
		if err != nil {
			t.Fatal(err)
		}
		if last := r.GetDeltas().GetLast(); last > *p.after {
			*p.after = last
		}
		out := map[string]string{}
		for _, d := range r.GetDeltas().GetDeltas() {
			out[d.Path] = d.Op.String() + " " + string(d.Value)
		}
		return out
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}

	a, b := open(), open()
	msg(a, `{"op":"sub","table":"orders"}`)
	msg(b, `{"op":"sub","table":"stock"}`)
	waitFor("the table set", func() bool {
		e := got.last("tables")
		return e != nil && len(e.GetTables().Tables) == 2
	})
	// A cached value marked with orders.
	msg(a, `{"op":"cache","key":"total","table":"orders","v":42}`)
	pull(a)
	pull(b)

	// b publishes a change of orders: a hears it (and its cached total
	// goes), b does not; the host is told to carry it further.
	msg(b, `{"op":"pub","table":"orders","v":{"id":7}}`)
	waitFor("the publish notice", func() bool { return got.last("publish") != nil })
	if pb := got.last("publish").GetPublish(); pb.Table != "orders" || string(pb.Data) != `{"id":7}` {
		t.Fatalf("publish notice %+v", pb)
	}
	var da map[string]string
	waitFor("a's delta", func() bool { da = pull(a); return len(da) > 0 })
	if da["cache/total"] != "DELETE " || da["heard/orders"] != "SET 1" {
		t.Fatalf("a's deltas after the change: %v", da)
	}
	if db := pull(b); len(db) != 0 {
		t.Fatalf("b, not subscribed to orders, got %v", db)
	}
	// A change from another worker (through the host) arrives the same way.
	if _, err := hs.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_TableChange{TableChange: &protocol.TableChange{Table: "stock", Origin: "w2"}}}); err != nil {
		t.Fatal(err)
	}
	var db map[string]string
	waitFor("b's delta", func() bool { db = pull(b); return len(db) > 0 })
	if db["heard/stock"] != "SET 1" {
		t.Fatalf("b's deltas: %v", db)
	}
	// A table nobody watches: delivered to nobody here.
	msg(a, `{"op":"pub","table":"nobody","v":1}`)
	if d := pull(a); len(d) != 0 {
		t.Fatalf("a got %v from an unwatched table", d)
	}
	// Releasing a's connection drops its subscription: the set shrinks.
	if _, err := hs.frame(&protocol.Frame{User: a.user, Conn: a.conn, Kind: &protocol.Frame_Release{Release: &protocol.Release{}}}); err != nil {
		t.Fatal(err)
	}
	waitFor("the smaller table set", func() bool {
		e := got.last("tables")
		return e != nil && len(e.GetTables().Tables) == 1 && e.GetTables().Tables[0] == "stock"
	})
	// Logging in keeps a page's subscriptions.
	if _, err := hs.frame(&protocol.Frame{User: b.user, Conn: b.conn, Kind: &protocol.Frame_Http{Http: &protocol.HTTPRequest{Method: "GET", Url: "/login?u=bea"}}}); err != nil {
		t.Fatal(err)
	}
	b.user = "bea"
	if _, err := hs.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_TableChange{TableChange: &protocol.TableChange{Table: "stock", Origin: "w2"}}}); err != nil {
		t.Fatal(err)
	}
	waitFor("b's delta after the login", func() bool { db = pull(b); return db["heard/stock"] == "SET 2" })
	if err := checkTables([]string{"Bad Name"}); err == nil {
		t.Fatal("a bad table name was accepted")
	}
}

// failingOpenApp subscribes a page to "orders" in OpenPage, then fails it
// when the page's kind is "fail".
type failingOpenApp struct{ tableApp }

func (failingOpenApp) OpenPage(_ context.Context, p *Page) error {
	if err := p.Subscribe("orders"); err != nil {
		return err
	}
	if p.Kind() == "fail" {
		return errors.New("no such page")
	}
	return nil
}

// A page whose OpenPage subscribed and then failed leaves no subscription
// behind: the worker's set stays empty and a change reaches no one. Pages
// opened and closed side by side by many people leave the host with the
// set the worker holds at the end, never an older one.
func TestFailedOpenAndTableSetOrder(t *testing.T) {
	hs, got := startNoticedApp(t, failingOpenApp{})

	conn := hs.get("", "", "/").Identity.Conn
	user := "~" + conn
	if _, err := hs.frame(&protocol.Frame{User: user, Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: "p", Kind: "fail"}}}); err == nil {
		t.Fatal("the failing open succeeded")
	}
	// The person's next frame runs after the failed open's table sync.
	hs.get(user, conn, "/")
	if e := got.last("tables"); e != nil && len(e.GetTables().Tables) != 0 {
		t.Fatalf("the host was told %v after a failed open", e.GetTables().Tables)
	}

	// Many people open and close pages on "orders" at once; the last set
	// the host hears is the worker's at the end.
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := hs.get("", "", "/").Identity.Conn
			u := "~" + c
			for j := range 5 {
				page := fmt.Sprintf("p%d-%d", i, j)
				if _, err := hs.frame(&protocol.Frame{User: u, Conn: c, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: page, Kind: "k"}}}); err != nil {
					t.Error(err)
					return
				}
				if _, err := hs.frame(&protocol.Frame{User: u, Conn: c, Kind: &protocol.Frame_Close{Close: &protocol.PageClose{Page: page}}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e := got.last("tables")
		if e != nil && len(e.GetTables().Tables) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every page closed, the host's last table set is %v", e.GetTables().GetTables())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
