package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// ckPerson is one connection of the test app driven from the host's side.
type ckPerson struct {
	h          *host
	user, conn string
}

func newCkPerson(h *host) *ckPerson {
	conn := h.get("", "", "/").Identity.Conn
	return &ckPerson{h: h, user: "~" + conn, conn: conn}
}

func (p *ckPerson) frame(f *protocol.Frame) *protocol.FrameReply {
	p.h.t.Helper()
	f.User, f.Conn = p.user, p.conn
	r, err := p.h.frame(f)
	if err != nil {
		p.h.t.Fatalf("frame %T: %v", f.Kind, err)
	}
	return r
}

func (p *ckPerson) open(page string, after uint64) *protocol.PageState {
	return p.frame(&protocol.Frame{Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: page, Kind: "k", After: after}}}).GetOpened()
}

func (p *ckPerson) msg(page string) *protocol.FrameReply {
	return p.frame(&protocol.Frame{Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: page, Data: []byte(`{}`)}}})
}

// checkpoint asks the worker for what changed.
func (h *host) checkpoint(maxBytes uint64) *protocol.Checkpointed {
	h.t.Helper()
	env, err := h.peer.Call(h.t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Checkpoint{Checkpoint: &protocol.Checkpoint{MaxBytes: maxBytes}}})
	if err != nil {
		h.t.Fatalf("checkpoint: %v", err)
	}
	c := env.GetCheckpointed()
	if c == nil {
		h.t.Fatalf("checkpoint answered %T", env.Body)
	}
	return c
}

// keys lists pieces as "user conn page" (page "-" for a connection's own).
func keys(ps []*protocol.CheckpointPiece) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.User+" "+p.Conn+" "+cmpOr(p.Page, "-"))
	}
	sort.Strings(out)
	return out
}

func goneKeys(ks []*protocol.CheckpointKey) []string {
	var out []string
	for _, k := range ks {
		out = append(out, k.User+" "+k.Conn+" "+cmpOr(k.Page, "-"))
	}
	sort.Strings(out)
	return out
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// counterOf decodes the "n" of a page piece's tree.
func counterOf(t *testing.T, p *protocol.CheckpointPiece) float64 {
	t.Helper()
	var cp protocol.ConnPackage
	if err := proto.Unmarshal(p.Package, &cp); err != nil || len(cp.Pages) != 1 {
		t.Fatalf("page piece: %v, %d pages", err, len(cp.Pages))
	}
	tr := newTree(nil)
	if err := decodeTree(tr, cp.Pages[0].Tree); err != nil {
		t.Fatal(err)
	}
	return tr.Number("n")
}

// A checkpoint sends only what changed since the last one: new pages and
// connections, pages written since, and the keys of pages that closed.
func TestCheckpointPackagesOnlyChangedPages(t *testing.T) {
	h := startWorker(t)
	ann := newCkPerson(h)
	for _, page := range []string{"p1", "p2", "p3"} {
		ann.open(page, 0)
	}
	u, c := ann.user, ann.conn
	first := h.checkpoint(0)
	want := []string{u + " " + c + " -", u + " " + c + " p1", u + " " + c + " p2", u + " " + c + " p3"}
	if got := keys(first.Pieces); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("first checkpoint: %v, want %v", got, want)
	}
	if first.More || len(first.Gone) != 0 {
		t.Fatalf("first checkpoint: more %v, gone %v", first.More, first.Gone)
	}
	if again := h.checkpoint(0); len(again.Pieces) != 0 || len(again.Gone) != 0 {
		t.Fatalf("nothing changed, yet the checkpoint sent %v and dropped %v", keys(again.Pieces), again.Gone)
	}

	// Two writes to p2: one piece, holding the last of them.
	ann.msg("p2")
	ann.msg("p2")
	c3 := h.checkpoint(0)
	if got := keys(c3.Pieces); len(got) != 1 || got[0] != u+" "+c+" p2" {
		t.Fatalf("after writing p2: %v", got)
	}
	if n := counterOf(t, c3.Pieces[0]); n != 2 {
		t.Fatalf("p2's piece holds n=%v, want 2", n)
	}

	// A closed page is dropped, not sent.
	ann.frame(&protocol.Frame{Kind: &protocol.Frame_Close{Close: &protocol.PageClose{Page: "p3"}}})
	c4 := h.checkpoint(0)
	if len(c4.Pieces) != 0 || strings.Join(goneKeys(c4.Gone), ",") != u+" "+c+" p3" {
		t.Fatalf("after closing p3: pieces %v, gone %v", keys(c4.Pieces), goneKeys(c4.Gone))
	}

	// A login moves the connection's pieces to the person's key.
	ann.frame(&protocol.Frame{Kind: &protocol.Frame_Http{Http: &protocol.HTTPRequest{Method: "GET", Url: "/login?u=ann"}}})
	ann.user = "ann"
	c5 := h.checkpoint(0)
	if got, want := keys(c5.Pieces), []string{"ann " + c + " -", "ann " + c + " p1", "ann " + c + " p2"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after the login: %v, want %v", got, want)
	}
	if got, want := goneKeys(c5.Gone), []string{u + " " + c + " -", u + " " + c + " p1", u + " " + c + " p2"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after the login, dropped %v, want %v", got, want)
	}

	// A frozen person is moving: their package is the truth, not a piece.
	ann.msg("p1")
	if _, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: &protocol.Freeze{User: "ann", Epoch: 1}}}); err != nil {
		t.Fatal(err)
	}
	if c6 := h.checkpoint(0); len(c6.Pieces) != 0 {
		t.Fatalf("a frozen person was checkpointed: %v", keys(c6.Pieces))
	}
}

// max_bytes bounds an answer: the people left over come with the next ask.
func TestCheckpointAnswersAreBounded(t *testing.T) {
	batch := ckBatch
	ckBatch = 1
	t.Cleanup(func() { ckBatch = batch })
	h := startWorker(t)
	a, b := newCkPerson(h), newCkPerson(h)
	a.open("p", 0)
	b.open("p", 0)
	first := h.checkpoint(1)
	if !first.More || len(first.Pieces) != 2 || first.Pieces[0].User != first.Pieces[1].User {
		t.Fatalf("a 1-byte answer: more %v, pieces %v (want one person's two)", first.More, keys(first.Pieces))
	}
	second := h.checkpoint(1)
	if second.More || len(second.Pieces) != 2 || second.Pieces[0].User == first.Pieces[0].User {
		t.Fatalf("the next answer: more %v, pieces %v (want the other person's two)", second.More, keys(second.Pieces))
	}
}

// A person woken from their checkpoint pieces on a new worker finds their
// pages as checkpointed; each page's next delta is a RESET with a notice,
// numbered above anything the dead worker could have sent.
func TestWakeFromCheckpoint(t *testing.T) {
	h := startWorker(t)
	ann := newCkPerson(h)
	ann.open("p", 0)
	for range 3 {
		ann.msg("p")
	}
	c := h.checkpoint(0)
	// Written after the checkpoint: lost with the worker.
	ann.msg("p")
	ann.msg("p")
	h.stop()

	pkg := &protocol.UserPackage{Format: packageFormat, User: ann.user}
	conns := map[string]*protocol.ConnPackage{}
	for _, p := range c.Pieces {
		var cp protocol.ConnPackage
		if err := proto.Unmarshal(p.Package, &cp); err != nil {
			t.Fatal(err)
		}
		if conns[cp.Name] == nil {
			conns[cp.Name] = &protocol.ConnPackage{Name: cp.Name, User: cp.User}
			pkg.Conns = append(pkg.Conns, conns[cp.Name])
		}
		if p.Page == "" {
			conns[cp.Name].Values = cp.Values
		}
		conns[cp.Name].Pages = append(conns[cp.Name].Pages, cp.Pages...)
	}
	b, _ := proto.Marshal(pkg)
	h2 := startApp(t, testApp{}, "w1")
	if _, err := h2.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: &protocol.Wake{
		User: ann.user, Package: b, Checkpoint: true, Generation: 1}}}); err != nil {
		t.Fatal(err)
	}
	ann.h = h2
	r := ann.msg("p")
	if got := string(r.GetMessage().Data); got != "4" {
		t.Fatalf("first message after the wake answered %s, want 4 (3 checkpointed + 1)", got)
	}
	// The client had up to sequence 6 from the dead worker.
	pull := ann.frame(&protocol.Frame{Kind: &protocol.Frame_Pull{Pull: &protocol.PagePull{Page: "p", After: 6}}}).GetDeltas()
	if len(pull.Deltas) != 2 {
		t.Fatalf("pull after the wake: %v", pull.Deltas)
	}
	reset, set := pull.Deltas[0], pull.Deltas[1]
	if reset.Op != protocol.Delta_RESET || reset.Seq <= 1<<32 || reset.Notice != noticeRestored || string(reset.Value) != `{"n":3}` {
		t.Fatalf("first delta after the wake: %+v", reset)
	}
	if set.Seq != reset.Seq+1 || set.Path != "n" || string(set.Value) != "4" {
		t.Fatalf("second delta after the wake: %+v", set)
	}
	// A tab reopening with what the dead worker sent is told too.
	if st := ann.open("p", 6); !st.Resync || st.Notice != noticeRestored {
		t.Fatalf("reopen after the wake: %+v", st)
	}
	// A second wake of the same checkpoint (its worker died again before the
	// next one) numbers above the first.
	h2.stop()
	h3 := startApp(t, testApp{}, "w1")
	if _, err := h3.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: &protocol.Wake{
		User: ann.user, Package: b, Checkpoint: true, Generation: 2}}}); err != nil {
		t.Fatal(err)
	}
	ann.h = h3
	pull = ann.frame(&protocol.Frame{Kind: &protocol.Frame_Pull{Pull: &protocol.PagePull{Page: "p", After: set.Seq}}}).GetDeltas()
	if len(pull.Deltas) != 1 || pull.Deltas[0].Op != protocol.Delta_RESET || pull.Deltas[0].Seq <= set.Seq || string(pull.Deltas[0].Value) != `{"n":3}` {
		t.Fatalf("pull after the second wake: %v", pull.Deltas)
	}
}

// BenchmarkCheckpointPage is what a person's checkpoint turn holds their
// mailbox for: packaging one changed page of 1 KB (encoded in the turn) or
// 1 MB (a view, encoded outside it).
func BenchmarkCheckpointPage(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			rt := &runtime{app: testApp{}, epochs: map[string]uint64{}, frozen: map[string]bool{},
				byUser: map[string]map[*Session]struct{}{}, conns: map[string]*Session{}}
			s := newSession(rt, "c", "ann")
			rt.addConnLocked(s)
			p := newPage(s, "p", "k")
			s.pages["p"] = p
			if err := p.Tree().Set("blob", strings.Repeat("x", size)); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				p.ckDirty.Store(true)
				pieces, later, _, err := rt.packageUser("ann")
				if err != nil || len(pieces)+len(later) == 0 {
					b.Fatalf("%d pieces, %v", len(pieces), err)
				}
				for _, l := range later {
					l.release()
				}
			}
		})
	}
}

// blobApp's pages hold a blob of blobBytes bytes beside their counter; the
// message "big" replaces the blob.
type blobApp struct{ testApp }

const blobBytes = 256 << 10

func (blobApp) OpenPage(ctx context.Context, p *Page) error {
	if err := p.Tree().Set("blob", strings.Repeat("x", blobBytes)); err != nil {
		return err
	}
	return p.Tree().Set("n", 0)
}

func (a blobApp) Message(ctx context.Context, p *Page, msg json.RawMessage) (any, error) {
	if string(msg) == `"big"` {
		return nil, p.Tree().Set("blob", strings.Repeat("y", blobBytes))
	}
	return a.testApp.Message(ctx, p, msg)
}

// pagePiece returns the one page piece of c, decoded.
func pagePiece(t *testing.T, c *protocol.Checkpointed) (*protocol.CheckpointPiece, *protocol.PagePackage) {
	t.Helper()
	for _, pc := range c.Pieces {
		if pc.Page == "" {
			continue
		}
		var cp protocol.ConnPackage
		if err := proto.Unmarshal(pc.Package, &cp); err != nil || len(cp.Pages) != 1 {
			t.Fatalf("page piece: %v, %d pages", err, len(cp.Pages))
		}
		return pc, cp.Pages[0]
	}
	t.Fatalf("no page piece in %v", keys(c.Pieces))
	return nil, nil
}

// A large page goes whole once, starting a chain, then as its writes
// since; it goes whole again when the host asks, when its writes grow
// large beside it, and after ckLinksMax increments. A small page always
// goes whole.
func TestCheckpointIncrements(t *testing.T) {
	h := startApp(t, blobApp{}, "w1")
	ann := newCkPerson(h)
	ann.open("p", 0)
	pc, pp := pagePiece(t, h.checkpoint(0))
	if pc.Chain == 0 || pc.Link != 0 || len(pp.Tree) < blobBytes {
		t.Fatalf("first piece: chain %d link %d, tree %d bytes", pc.Chain, pc.Link, len(pp.Tree))
	}
	chain := pc.Chain
	ann.msg("p")
	ann.msg("p")
	pc, pp = pagePiece(t, h.checkpoint(0))
	if pc.Chain != chain || pc.Link != 1 || len(pp.Tree) != 0 || len(pp.Journal) != 2 || len(pc.Package) > 256 {
		t.Fatalf("after two writes: chain %d link %d, tree %d bytes, journal %v, %d bytes", pc.Chain, pc.Link, len(pp.Tree), pp.Journal, len(pc.Package))
	}
	if string(pp.Journal[1].Value) != "2" || pp.Journal[1].Path != "n" || pp.Seq == 0 {
		t.Fatalf("increment: %+v, seq %d", pp.Journal, pp.Seq)
	}
	ann.msg("p")
	if pc, _ = pagePiece(t, h.checkpoint(0)); pc.Link != 2 || pc.Chain != chain {
		t.Fatalf("the next increment: chain %d link %d", pc.Chain, pc.Link)
	}

	// The host asks for it whole (it could not keep an increment).
	env, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Checkpoint{Checkpoint: &protocol.Checkpoint{
		Full: []*protocol.CheckpointKey{{User: ann.user, Conn: ann.conn, Page: "p"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	pc, pp = pagePiece(t, env.GetCheckpointed())
	if pc.Link != 0 || pc.Chain == chain || pc.Chain == 0 || len(pp.Tree) < blobBytes {
		t.Fatalf("asked whole: chain %d (was %d) link %d, tree %d bytes", pc.Chain, chain, pc.Link, len(pp.Tree))
	}
	chain = pc.Chain

	// A write as large as the page: whole again.
	ann.frame(&protocol.Frame{Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p", Data: []byte(`"big"`)}}})
	if pc, pp = pagePiece(t, h.checkpoint(0)); pc.Link != 0 || pc.Chain == chain || len(pp.Tree) < blobBytes {
		t.Fatalf("after a large write: chain %d link %d, tree %d bytes", pc.Chain, pc.Link, len(pp.Tree))
	}

	// After ckLinksMax increments, whole again.
	for i := 1; i <= ckLinksMax+1; i++ {
		ann.msg("p")
		pc, _ = pagePiece(t, h.checkpoint(0))
		if want := uint32(i % (ckLinksMax + 1)); pc.Link != want {
			t.Fatalf("round %d: link %d, want %d", i, pc.Link, want)
		}
	}

	// A small page: whole every time, no chain.
	small := startWorker(t)
	bob := newCkPerson(small)
	bob.open("p", 0)
	for range 2 {
		bob.msg("p")
		if pc, pp = pagePiece(t, small.checkpoint(0)); pc.Chain != 0 || pc.Link != 0 || len(pp.Tree) == 0 {
			t.Fatalf("small page: chain %d link %d, tree %d bytes", pc.Chain, pc.Link, len(pp.Tree))
		}
	}
}

// A large page's whole piece is encoded outside its person's mailbox from a
// view: what the person writes after their turn is not in it, and the tree
// they go on writing is not changed by the encode.
func TestCheckpointWholeFromView(t *testing.T) {
	rt := &runtime{app: testApp{}, epochs: map[string]uint64{}, frozen: map[string]bool{},
		byUser: map[string]map[*Session]struct{}{}, conns: map[string]*Session{}}
	s := newSession(rt, "c", "ann")
	rt.addConnLocked(s)
	p := newPage(s, "p", "k")
	s.pages["p"] = p
	if err := p.Tree().Set("blob", map[string]any{"a": strings.Repeat("x", blobBytes), "b": "old"}); err != nil {
		t.Fatal(err)
	}
	p.ckDirty.Store(true)
	pieces, later, _, err := rt.packageUser("ann")
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range pieces {
		if pc.Page != "" {
			t.Fatalf("the large page was encoded in the turn: %+v", pc.Page)
		}
	}
	if len(later) != 1 || later[0].piece.Page != "p" || later[0].piece.Link != 0 || later[0].piece.Chain == 0 {
		t.Fatalf("later: %+v", later)
	}
	// The person goes on, before the piece is encoded.
	if err := p.Tree().Set("blob/b", "new"); err != nil {
		t.Fatal(err)
	}
	if err := p.Tree().Set("n", 1); err != nil {
		t.Fatal(err)
	}
	if err := later[0].encode(); err != nil {
		t.Fatal(err)
	}
	var cp protocol.ConnPackage
	if err := proto.Unmarshal(later[0].piece.Package, &cp); err != nil || len(cp.Pages) != 1 {
		t.Fatalf("piece: %v", err)
	}
	tr := &Tree{}
	if err := decodeTree(tr, cp.Pages[0].Tree); err != nil {
		t.Fatal(err)
	}
	if got := tr.Get("blob/b"); got != "old" || tr.Get("n") != nil {
		t.Fatalf("the piece holds blob/b %v, n %v: want the tree as of the turn", got, tr.Get("n"))
	}
	if got := p.Tree().Get("blob/b"); got != "new" || p.tree.readers.Load() != 0 {
		t.Fatalf("the live tree: blob/b %v, %d views held", got, p.tree.readers.Load())
	}
}
