package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// A view of a tree stays as it was while the tree is written, at any depth,
// and the tree reads as if no view had been taken.
func TestTreeViewStaysAsItWas(t *testing.T) {
	tr := newTree(nil)
	for _, set := range []struct {
		path string
		v    any
	}{{"a/b/c", 1}, {"a/list", []any{1, map[string]any{"x": "y"}, 3}}, {"z", "top"}} {
		if err := tr.Set(set.path, set.v); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := json.Marshal(tr.root)
	root, release := tr.view()
	write := func() {
		for _, err := range []error{
			tr.Set("a/b/c", 2), tr.Set("a/b/new", true), tr.Set("a/list/1/x", "changed"), tr.Set("a/list/0", 9),
			tr.Set("n/e/w", "deep"), tr.Set("z", "top2"),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		tr.Delete("a/b/c")
	}
	write()
	if got, _ := json.Marshal(root); string(got) != string(before) {
		t.Fatalf("the view changed:\n got %s\nwant %s", got, before)
	}
	// The same writes on a tree without a view give the same tree.
	plain := newTree(nil)
	_ = plain.Set("a/b/c", 1)
	_ = plain.Set("a/list", []any{1, map[string]any{"x": "y"}, 3})
	_ = plain.Set("z", "top")
	tr2 := tr
	tr = plain
	write()
	if !reflect.DeepEqual(tr2.root, plain.root) {
		t.Fatalf("a tree written under a view reads %v, without one %v", tr2.root, plain.root)
	}
	release()
	release() // idempotent
	if tr2.readers.Load() != 0 {
		t.Fatalf("readers %d after release", tr2.readers.Load())
	}
	// With no view left, writes go in place again.
	if err := tr2.Set("a/b/d", 1); err != nil || tr2.own != nil {
		t.Fatalf("after release: %v, own %v", err, tr2.own)
	}
}

// pathApp writes and reads its page tree by path: {"set":P,"v":V},
// {"del":P}, {"get":P}, {"fill":N} (N rows of about 200 bytes).
type pathApp struct{ testApp }

func (pathApp) Message(ctx context.Context, p *Page, msg json.RawMessage) (any, error) {
	var m struct {
		Set, Del, Get *string
		V             any
		Fill          int
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil, err
	}
	tr := p.Tree()
	switch {
	case m.Set != nil:
		return nil, tr.Set(*m.Set, m.V)
	case m.Del != nil:
		tr.Delete(*m.Del)
		return nil, nil
	case m.Get != nil:
		return tr.Get(*m.Get), nil
	}
	rows := make([]any, m.Fill)
	for i := range rows {
		rows[i] = map[string]any{"name": fmt.Sprintf("row %d %s", i, strings.Repeat("x", 160)), "tags": []any{"a", "b"}, "n": i}
	}
	return nil, tr.Set("rows", rows)
}

type pager struct {
	h          *host
	user, conn string
}

func (p pager) send(page, msg string, epoch uint64) (json.RawMessage, error) {
	p.h.t.Helper()
	r, err := p.h.frame(&protocol.Frame{User: p.user, Conn: p.conn, Epoch: epoch, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: page, Data: []byte(msg)}}})
	if err != nil {
		return nil, err
	}
	if e := r.GetMessage().GetError(); e != "" {
		return nil, fmt.Errorf("%s", e)
	}
	return r.GetMessage().GetData(), nil
}

func (p pager) open(page string, epoch uint64) {
	p.h.t.Helper()
	if _, err := p.h.frame(&protocol.Frame{User: p.user, Conn: p.conn, Epoch: epoch, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: page, Kind: "k"}}}); err != nil {
		p.h.t.Fatal(err)
	}
}

// deltas pulls every delta the page holds (acknowledging none).
func (p pager) deltas(page string, epoch uint64) string {
	p.h.t.Helper()
	r, err := p.h.frame(&protocol.Frame{User: p.user, Conn: p.conn, Epoch: epoch, Kind: &protocol.Frame_Pull{Pull: &protocol.PagePull{Page: page}}})
	if err != nil {
		p.h.t.Fatalf("pulling %s: %v", page, err)
	}
	var b strings.Builder
	for _, d := range r.GetDeltas().GetDeltas() {
		fmt.Fprintf(&b, "%d %v %s %d:%.40s\n", d.Seq, d.Op, d.Path, len(d.Value), d.Value)
	}
	return b.String()
}

func (p pager) must(page, msg string, epoch uint64) json.RawMessage {
	p.h.t.Helper()
	b, err := p.send(page, msg, epoch)
	if err != nil {
		p.h.t.Fatalf("%s on %s: %v", msg, page, err)
	}
	return b
}

// A move with a precopy: the destination stages the person's state while
// they go on writing at home, the freeze hands over only those writes, and
// the wake gives the destination exactly the state the person had, pages
// opened after the precopy and writes of every kind included. Without the
// staged copy, the wake is refused NOT_FOUND (changing nothing) and works
// when sent again with it.
func TestMoveWithPrecopy(t *testing.T) {
	for _, staged := range []bool{true, false} {
		t.Run(fmt.Sprintf("staged=%v", staged), func(t *testing.T) {
			from := startApp(t, pathApp{}, "w1")
			to := startApp(t, pathApp{}, "w2")
			conn := from.get("", "", "/").Identity.Conn
			p := pager{h: from, user: "~" + conn, conn: conn}
			p.open("p1", 0)
			p.open("small", 0)
			p.must("p1", `{"fill":3000}`, 0)
			p.must("small", `{"set":"a","v":1}`, 0)

			env, err := from.call(&protocol.Envelope{Body: &protocol.Envelope_Precopy{Precopy: &protocol.Precopy{User: p.user}}}, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			pc := env.GetPrecopied()
			if pc.Small || pc.Base == 0 || len(pc.Package) < precopyMin || pc.Pages != 2 {
				t.Fatalf("precopy: small %v base %d, %d bytes, %d pages", pc.Small, pc.Base, len(pc.Package), pc.Pages)
			}
			// The person goes on at home.
			for _, m := range []string{`{"set":"rows/5/name","v":"renamed"}`, `{"set":"rows/7/tags/0","v":"z"}`, `{"del":"rows/9/n"}`, `{"set":"extra/deep/x","v":[1,2,{"k":"v"}]}`} {
				p.must("p1", m, 0)
			}
			p.must("small", `{"set":"","v":{"replaced":true}}`, 0)
			p.open("late", 0)
			p.must("late", `{"set":"b","v":"after"}`, 0)

			// The precopy is the state before those writes.
			var pkg protocol.UserPackage
			if err := unmarshalPackage(pc.Package, &pkg); err != nil || pkg.Precopy != pc.Base {
				t.Fatalf("precopy package: %v, precopy %d", err, pkg.Precopy)
			}
			for _, pp := range pkg.Conns[0].Pages {
				tr := newTree(nil)
				if err := decodeTree(tr, pp.Tree); err != nil {
					t.Fatal(err)
				}
				if pp.Id == "p1" && tr.String("rows/5/name") == "renamed" {
					t.Fatal("the precopy holds a write made after it")
				}
			}

			want := map[string]json.RawMessage{}
			wantDeltas := map[string]string{}
			for _, page := range []string{"p1", "small", "late"} {
				want[page] = p.must(page, `{"get":""}`, 0)
				wantDeltas[page] = p.deltas(page, 0)
			}
			if n := strings.Count(wantDeltas["p1"], "\n"); n != 6 {
				t.Fatalf("p1 holds %d deltas, want 6 (open, fill, 4 writes):\n%s", n, wantDeltas["p1"])
			}
			const digest = "sha256:base"
			if staged {
				if _, err := to.call(&protocol.Envelope{Body: &protocol.Envelope_Stage{Stage: &protocol.Stage{User: p.user, Digest: digest, Package: pc.Package}}}, 5*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			env, err = from.call(&protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: &protocol.Freeze{User: p.user, Epoch: 1, Base: pc.Base, BaseDigest: digest}}}, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			fz := env.GetFrozen()
			if fz.FromBase != 2 || fz.Pages != 3 || len(fz.Package) > 64<<10 {
				t.Fatalf("freeze: %d of %d pages from the base, %d bytes", fz.FromBase, fz.Pages, len(fz.Package))
			}
			wake := &protocol.Wake{User: p.user, Epoch: 1, Package: fz.Package}
			_, err = to.call(&protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: wake}}, 5*time.Second)
			if !staged {
				if remoteCode(err) != protocol.Error_NOT_FOUND {
					t.Fatalf("a wake without its base: %v", err)
				}
				wake.BasePackage = pc.Package
				_, err = to.call(&protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: wake}}, 5*time.Second)
			}
			if err != nil {
				t.Fatal(err)
			}
			q := pager{h: to, user: p.user, conn: p.conn}
			for page, w := range want {
				got := q.must(page, `{"get":""}`, 1)
				if string(got) != string(w) {
					t.Fatalf("page %s after the move:\n got %.200s\nwant %.200s", page, got, w)
				}
				if got := q.deltas(page, 1); got != wantDeltas[page] {
					t.Fatalf("page %s's deltas after the move:\n got %s\nwant %s", page, got, wantDeltas[page])
				}
			}
			if _, err := p.send("p1", `{"get":""}`, 1); remoteCode(err) != protocol.Error_MOVED {
				t.Fatalf("the old worker after the freeze: %v", err)
			}
		})
	}
}

// A small person is not precopied: the read loop says so at once.
func TestPrecopyOfASmallPerson(t *testing.T) {
	h := startApp(t, pathApp{}, "w1")
	conn := h.get("", "", "/").Identity.Conn
	p := pager{h: h, user: "~" + conn, conn: conn}
	p.open("p", 0)
	p.must("p", `{"set":"a","v":1}`, 0)
	env, err := h.call(&protocol.Envelope{Body: &protocol.Envelope_Precopy{Precopy: &protocol.Precopy{User: p.user}}}, 5*time.Second)
	if err != nil || !env.GetPrecopied().GetSmall() {
		t.Fatalf("precopy of a small person: %v %v", env, err)
	}
	// A freeze naming a base it never took sends everything.
	env, err = h.call(&protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: &protocol.Freeze{User: p.user, Epoch: 1, Base: 7, BaseDigest: "sha256:x"}}}, 5*time.Second)
	if err != nil || env.GetFrozen().FromBase != 0 {
		t.Fatalf("freeze with an unknown base: %v %v", env, err)
	}
	var pkg protocol.UserPackage
	if err := unmarshalPackage(env.GetFrozen().Package, &pkg); err != nil || pkg.BaseDigest != "" {
		t.Fatalf("package: %v, base %q", err, pkg.BaseDigest)
	}
}

// A tree knows its size as the codec writes it, write by write.
func TestTreeKnowsItsSize(t *testing.T) {
	tr := newTree(nil)
	check := func(what string) {
		t.Helper()
		if want := int64(sizeValue(tr.root)); tr.size != want {
			t.Fatalf("after %s: size %d, the codec writes %d", what, tr.size, want)
		}
	}
	check("nothing")
	steps := []struct {
		what string
		do   func() error
	}{
		{"a new key", func() error { return tr.Set("a", "hello") }},
		{"a deep new path", func() error { return tr.Set("x/y/z", 1) }},
		{"a replaced value", func() error { return tr.Set("a", strings.Repeat("w", 300)) }},
		{"an array", func() error { return tr.Set("list", []any{1, "two", map[string]any{"k": true}}) }},
		{"an array element", func() error { return tr.Set("list/1", "three hundred") }},
		{"a delete", func() error { tr.Delete("x/y"); return nil }},
		{"a delete of nothing", func() error { tr.Delete("nope/nope"); return nil }},
		{"the root", func() error { return tr.Set("", map[string]any{"only": "this"}) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatal(err)
		}
		check(s.what)
	}
	b, err := encodeTree(tr)
	if err != nil {
		t.Fatal(err)
	}
	back := newTree(nil)
	if err := decodeTree(back, b); err != nil || back.size != tr.size {
		t.Fatalf("decoded: %v, size %d, want %d", err, back.size, tr.size)
	}
}

// A write past a page's or a person's state bound is refused with a message
// the page sees and counted; shrinking or deleting makes room again.
func TestStateIsBounded(t *testing.T) {
	h := startAppWith(t, pathApp{}, "w1", Options{Name: "test", MaxPageBytes: 64 << 10, MaxPersonBytes: 90 << 10})
	conn := h.get("", "", "/").Identity.Conn
	p := pager{h: h, user: "~" + conn, conn: conn}
	set := func(page, path string, n int) error {
		_, err := p.send(page, fmt.Sprintf(`{"set":%q,"v":%q}`, path, strings.Repeat("x", n)), 0)
		return err
	}
	p.open("p1", 0)
	p.open("p2", 0)
	if err := set("p1", "a", 40<<10); err != nil {
		t.Fatal(err)
	}
	err := set("p1", "b", 30<<10)
	if err == nil || !strings.Contains(err.Error(), "at most 65536 are allowed per page") {
		t.Fatalf("a page past its bound: %v", err)
	}
	if err := set("p1", "a", 10<<10); err != nil {
		t.Fatalf("shrinking: %v", err)
	}
	if err := set("p1", "b", 30<<10); err != nil {
		t.Fatalf("after shrinking: %v", err)
	}
	if err := set("p2", "c", 40<<10); err != nil {
		t.Fatal(err)
	}
	err = set("p2", "d", 15<<10)
	if err == nil || !strings.Contains(err.Error(), "allowed per person") {
		t.Fatalf("a person past their bound: %v", err)
	}
	p.must("p1", `{"del":"b"}`, 0)
	if err := set("p2", "d", 15<<10); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	r, err := h.probe(5 * time.Second)
	if err != nil || r.StateRefused != 2 {
		t.Fatalf("probe: %v, %d refused, want 2", err, r.GetStateRefused())
	}
}
