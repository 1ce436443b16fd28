package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// piece builds a checkpoint piece of conn (page "" for the connection's
// own, holding values) with content marking it apart.
func piece(t *testing.T, user string, epoch uint64, conn, page, content string) *protocol.CheckpointPiece {
	t.Helper()
	cp := &protocol.ConnPackage{Name: conn, User: user}
	if page == "" {
		cp.Values = []byte(content)
	} else {
		cp.Pages = []*protocol.PagePackage{{Id: page, Kind: "k", Tree: []byte(content)}}
	}
	b, err := proto.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	return &protocol.CheckpointPiece{User: user, Epoch: epoch, Conn: conn, Page: page, Package: b}
}

func pagesOf(x *CheckpointIndex, worker, user string) string {
	var out []string
	for _, p := range x.Pages(worker, user) {
		out = append(out, p.Conn+"/"+p.Page)
	}
	return strings.Join(out, ",")
}

// The index keeps the latest piece of each page, deletes what is
// superseded, dropped or of an older epoch, and gives back a person's
// pieces as one package.
func TestCheckpointIndex(t *testing.T) {
	store := park.NewMemStore()
	journal := &MemCheckpointJournal{}
	x := NewCheckpointIndex(CheckpointConfig{Store: store, Journal: journal})
	record := func(inc int, c *protocol.Checkpointed) {
		t.Helper()
		if err := x.Record("w1", inc, c); err != nil {
			t.Fatal(err)
		}
	}
	conn := piece(t, "ann", 1, "c1", "", "values")
	p1 := piece(t, "ann", 1, "c1", "p1", "one")
	p2 := piece(t, "ann", 1, "c1", "p2", "two")
	record(1, &protocol.Checkpointed{Pieces: []*protocol.CheckpointPiece{conn, p1, p2}})
	if got := pagesOf(x, "w1", "ann"); got != "c1/,c1/p1,c1/p2" {
		t.Fatalf("after the first round: %s", got)
	}
	// A newer piece of p1 replaces the old one, whose package is deleted.
	p1b := piece(t, "ann", 1, "c1", "p1", "one, later")
	record(1, &protocol.Checkpointed{Pieces: []*protocol.CheckpointPiece{p1b}})
	if store.Has(park.Digest(p1.Package)) || !store.Has(park.Digest(p1b.Package)) {
		t.Fatal("the superseded piece is still parked, or the new one is not")
	}
	// A closed page is dropped with its package.
	record(1, &protocol.Checkpointed{Gone: []*protocol.CheckpointKey{{User: "ann", Conn: "c1", Page: "p2"}}})
	if got := pagesOf(x, "w1", "ann"); got != "c1/,c1/p1" || store.Has(park.Digest(p2.Package)) {
		t.Fatalf("after p2 closed: %s (package kept: %v)", got, store.Has(park.Digest(p2.Package)))
	}

	// The new incarnation wakes ann; the one that took the pieces would not.
	if got := x.Restorable("w1", 1); len(got) != 0 {
		t.Fatalf("restorable by the incarnation that took the pieces: %v", got)
	}
	if got := x.Restorable("w1", 2); len(got) != 1 || got[0] != "ann" {
		t.Fatalf("restorable by the next incarnation: %v", got)
	}
	b, gen, err := x.Restore("w1", "ann", 1)
	if err != nil || gen != 1 {
		t.Fatalf("restore: gen %d, %v", gen, err)
	}
	var pkg protocol.UserPackage
	if err := proto.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	if pkg.Format != checkpointFormat || pkg.User != "ann" || len(pkg.Conns) != 1 || string(pkg.Conns[0].Values) != "values" ||
		len(pkg.Conns[0].Pages) != 1 || string(pkg.Conns[0].Pages[0].Tree) != "one, later" {
		t.Fatalf("restored package: %v", &pkg)
	}
	if _, gen, _ := x.Restore("w1", "ann", 1); gen != 2 {
		t.Fatalf("second restore's generation %d, want 2", gen)
	}

	// Pieces of a newer epoch replace every older one.
	p3 := piece(t, "ann", 2, "c1", "p3", "three")
	record(2, &protocol.Checkpointed{Pieces: []*protocol.CheckpointPiece{p3}})
	if got := pagesOf(x, "w1", "ann"); got != "c1/p3" || store.Has(park.Digest(p1b.Package)) || store.Has(park.Digest(conn.Package)) {
		t.Fatalf("after epoch 2: %s", got)
	}
	// A frame of a later epoch (the person moved since): nothing to wake
	// from, and the stale pieces go.
	if b, _, err := x.Restore("w1", "ann", 3); b != nil || err != nil {
		t.Fatalf("restore at a later epoch: %d bytes, %v", len(b), err)
	}
	x.Flush() // a forgotten person's pieces go with the journal's next write
	if got := pagesOf(x, "w1", "ann"); got != "" || store.Has(park.Digest(p3.Package)) {
		t.Fatalf("stale pieces kept: %s", got)
	}

	// One package may stand for two keys: it is deleted with the last.
	same := piece(t, "bo", 1, "c2", "p", "same")
	record(1, &protocol.Checkpointed{Pieces: []*protocol.CheckpointPiece{same}})
	if err := x.Record("w2", 1, &protocol.Checkpointed{Pieces: []*protocol.CheckpointPiece{same}}); err != nil {
		t.Fatal(err)
	}
	x.Forget("w1", "bo", 0)
	if !store.Has(park.Digest(same.Package)) {
		t.Fatal("a package still named by w2 was deleted")
	}
	x.ForgetWorker("w2")
	if store.Has(park.Digest(same.Package)) {
		t.Fatal("a package nobody names is still parked")
	}

	// The journal brings the index back after an agent restart, its pieces
	// counted as older than any incarnation; Keep prunes who moved away.
	cy := piece(t, "cy", 4, "c3", "p", "cy's")
	dee := piece(t, "dee", 1, "c4", "p", "dee's")
	record(5, &protocol.Checkpointed{Pieces: []*protocol.CheckpointPiece{cy, dee}})
	if _, _, err := x.Restore("w1", "cy", 4); err != nil {
		t.Fatal(err)
	}
	y := NewCheckpointIndex(CheckpointConfig{Store: store, Journal: journal,
		Keep: func(worker, user string, epoch uint64) bool { return user != "dee" }})
	if n, err := y.Load(); err != nil || n != 1 {
		t.Fatalf("load: %d people, %v", n, err)
	}
	if got := y.Restorable("w1", 1); len(got) != 1 || got[0] != "cy" {
		t.Fatalf("restorable after a restart: %v", got)
	}
	// Deleted behind the start.
	for deadline := time.Now().Add(5 * time.Second); store.Has(park.Digest(dee.Package)); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the package of a person who moved away survived the restart")
		}
	}
	if _, gen, _ := y.Restore("w1", "cy", 4); gen != 2 {
		t.Fatalf("generation after a restart: %d, want 2 (it is journaled)", gen)
	}
	rec, _ := journal.Load()
	var users map[string]json.RawMessage
	if err := json.Unmarshal(rec["w1"], &users); err != nil || len(users) != 1 {
		t.Fatalf("journal after the prune: %s (%v)", rec["w1"], err)
	}
}

// A worker whose hello does not say it checkpoints (the Python SDK) is
// never asked, and asking by hand says why.
func TestWorkerWithoutCheckpointsIsNotAsked(t *testing.T) {
	l := &fakeLauncher{version: protocol.Version}
	p := New(nil, []GroupSpec{{Name: "web", Workers: 1, Launcher: l, CheckpointInterval: 5 * time.Millisecond}})
	p.Checkpoints = NewCheckpointIndex(CheckpointConfig{Store: park.NewMemStore()})
	defer p.Close()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // rounds would have run by now
	if n := l.checkpoints.Load(); n != 0 {
		t.Fatalf("a worker without checkpoints was asked %d times", n)
	}
	if err := p.Checkpoint(t.Context(), "web-1"); !errors.Is(err, ErrNoCheckpoints) {
		t.Fatalf("checkpointing it by hand: %v", err)
	}
	if w := p.Workers()[0]; w.CheckpointRounds != 0 || !w.LastCheckpoint.IsZero() {
		t.Fatalf("worker info: %+v", w)
	}
}

// frameOf sends f to web-1 and waits for the answer.
func frameOf(t *testing.T, p *Pool, f *protocol.Frame) (*protocol.FrameReply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := p.Send(ctx, "web-1", f)
	if err != nil {
		return nil, err
	}
	env, err := c.Wait(ctx)
	if err != nil {
		return nil, err
	}
	return env.GetFrameReply(), nil
}

func incOf(t *testing.T, p *Pool, user, conn, page string) (float64, error) {
	t.Helper()
	r, err := frameOf(t, p, &protocol.Frame{User: user, Conn: conn, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: page, Data: []byte(`{"op":"inc"}`)}}})
	if err != nil {
		return 0, err
	}
	var v struct{ Count float64 }
	if err := json.Unmarshal(r.GetMessage().GetData(), &v); err != nil {
		return 0, err
	}
	return v.Count, nil
}

// checkpointedPool is a pool of one counter worker checkpointing into an
// index on a memory store (rounds only when a test asks), and one
// connection on it.
func checkpointedPool(t *testing.T) (p *Pool, x *CheckpointIndex, conn, user string) {
	t.Helper()
	l := &InprocLauncher{Serve: worker.InProcess(counter.New(), worker.Options{Name: "counter"})}
	p = New(nil, []GroupSpec{{Name: "web", Workers: 1, Launcher: l, CheckpointInterval: time.Hour}})
	x = NewCheckpointIndex(CheckpointConfig{Store: park.NewMemStore()})
	p.Checkpoints = x
	t.Cleanup(func() { p.Close() })
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	r, err := frameOf(t, p, &protocol.Frame{Kind: &protocol.Frame_Http{Http: &protocol.HTTPRequest{Method: "GET", Url: "/"}}})
	if err != nil {
		t.Fatal(err)
	}
	conn = r.Identity.Conn
	return p, x, conn, protocol.AnonymousUser(conn)
}

// killAndRelaunch kills the pool's only worker and waits for its second
// incarnation to be ready.
func killAndRelaunch(t *testing.T, p *Pool) {
	t.Helper()
	s, _ := p.slot("web-1")
	s.mu.Lock()
	proc := s.proc
	s.mu.Unlock()
	proc.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for w := p.Workers()[0]; w.State != StateReady || w.Incarnation != 2; w = p.Workers()[0] {
		if time.Now().After(deadline) {
			t.Fatalf("worker not relaunched: %+v", w)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A worker that dies: its replacement wakes its people from their last
// checkpoint before their next frame. A page opened after it is not there
// (it restarts clean when reopened, as without checkpoints).
func TestReplacementWakesFromCheckpoint(t *testing.T) {
	p, x, conn, user := checkpointedPool(t)
	open := func(page string) {
		t.Helper()
		if _, err := frameOf(t, p, &protocol.Frame{User: user, Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: page, Kind: "counter"}}}); err != nil {
			t.Fatal(err)
		}
	}
	open("p")
	for range 3 {
		if _, err := incOf(t, p, user, conn, "p"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Checkpoint(t.Context(), "web-1"); err != nil {
		t.Fatal(err)
	}
	if w := p.Workers()[0]; w.CheckpointRounds != 1 || w.CheckpointPieces != 2 || w.LastCheckpoint.IsZero() {
		t.Fatalf("worker info after a round: %+v", w)
	}
	// After the checkpoint: lost with the worker.
	if _, err := incOf(t, p, user, conn, "p"); err != nil {
		t.Fatal(err)
	}
	open("q")

	killAndRelaunch(t, p)
	if n, err := incOf(t, p, user, conn, "p"); err != nil || n != 4 {
		t.Fatalf("first inc after the crash: %v %v, want 4 (3 checkpointed + 1)", n, err)
	}
	if _, err := incOf(t, p, user, conn, "q"); err == nil || !strings.Contains(err.Error(), "not open") {
		t.Fatalf("a page opened after the checkpoint: %v", err)
	}
	// The restored page is checkpointed again by the new incarnation.
	if err := p.Checkpoint(t.Context(), "web-1"); err != nil {
		t.Fatal(err)
	}
	if got := pagesOf(x, "web-1", user); got != conn+"/,"+conn+"/p" {
		t.Fatalf("index after the new incarnation's round: %s", got)
	}
	// Evicting the person (their move committed elsewhere) drops it all.
	if _, err := p.StartEnvelope(t.Context(), "web-1", &protocol.Envelope{Body: &protocol.Envelope_Evict{Evict: &protocol.Evict{User: user}}}); err != nil {
		t.Fatal(err)
	}
	if got := pagesOf(x, "web-1", user); got != "" {
		t.Fatalf("index after the eviction: %s", got)
	}
}

// incPiece builds an increment of page of conn: link of chain, holding one
// write of path to value.
func incPiece(t *testing.T, user, conn, page string, chain uint64, link uint32, seq uint64, path, value string) *protocol.CheckpointPiece {
	t.Helper()
	cp := &protocol.ConnPackage{Name: conn, User: user, Pages: []*protocol.PagePackage{{Id: page, Kind: "k", Seq: seq,
		Journal: []*protocol.Delta{{Op: protocol.Delta_SET, Path: path, Value: []byte(value)}},
		// Each piece carries the page's whole message memory.
		Answered: []*protocol.AnsweredMessage{{MsgId: fmt.Sprintf("m-%d", seq)}}}}}
	b, err := proto.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	return &protocol.CheckpointPiece{User: user, Epoch: 1, Conn: conn, Page: page, Package: b, Chain: chain, Link: link}
}

// An increment is kept only on the piece it follows (same chain, next
// link); one that does not is dropped and its page asked for whole. A
// restore hands the page over with every increment's writes, in order.
func TestCheckpointIndexIncrements(t *testing.T) {
	store := park.NewMemStore()
	x := NewCheckpointIndex(CheckpointConfig{Store: store, Journal: &MemCheckpointJournal{}})
	record := func(pcs ...*protocol.CheckpointPiece) {
		t.Helper()
		if err := x.Record("w1", 1, &protocol.Checkpointed{Pieces: pcs}); err != nil {
			t.Fatal(err)
		}
	}
	base := piece(t, "ann", 1, "c1", "p", "base")
	base.Chain = 5
	record(base)
	if keys := x.Resend("w1"); len(keys) != 0 {
		t.Fatalf("asked for %v after a whole piece", keys)
	}
	record(incPiece(t, "ann", "c1", "p", 5, 1, 10, "n", "1"))
	record(incPiece(t, "ann", "c1", "p", 5, 3, 12, "n", "3"))   // link 2 is missing
	record(incPiece(t, "ann", "c1", "p", 7, 2, 12, "n", "3"))   // another chain
	record(incPiece(t, "ann", "c1", "q", 5, 1, 12, "n", "3"))   // no piece of q
	record(incPiece(t, "ann", "c1", "p", 5, 2, 11, "m", `"x"`)) // follows link 1
	keys := x.Resend("w1")
	var got []string
	for _, k := range keys {
		got = append(got, k.Conn+"/"+k.Page)
	}
	if strings.Join(got, ",") != "c1/p,c1/p,c1/q" {
		t.Fatalf("asked for whole: %v, want c1/p twice and c1/q", got)
	}
	if again := x.Resend("w1"); len(again) != 0 {
		t.Fatalf("asked twice: %v", again)
	}
	pages := x.Pages("w1", "ann")
	if len(pages) != 1 || pages[0].Increments != 2 {
		t.Fatalf("pages after the increments: %+v", pages)
	}
	if n := store.Len(); n != 3 {
		t.Fatalf("the store holds %d packages, want the piece and its 2 increments", n)
	}
	b, _, err := x.Restore("w1", "ann", 1)
	if err != nil {
		t.Fatal(err)
	}
	var pkg protocol.UserPackage
	if err := proto.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	pp := pkg.Conns[0].Pages[0]
	if string(pp.Tree) != "base" || len(pp.Journal) != 2 || pp.Journal[0].Path != "n" || pp.Journal[1].Path != "m" || pp.Seq != 11 {
		t.Fatalf("restored page: tree %q, journal %v, seq %d", pp.Tree, pp.Journal, pp.Seq)
	}
	// A resend after the crash finds the answers the last increment knew.
	if len(pp.Answered) != 1 || pp.Answered[0].MsgId != "m-11" {
		t.Fatalf("restored page remembers %v, want the last increment's m-11", pp.Answered)
	}
	// A whole piece starts over: the old chain's packages are deleted.
	record(piece(t, "ann", 1, "c1", "p", "again"))
	if n := store.Len(); n != 1 {
		t.Fatalf("the store holds %d packages after a whole piece, want 1", n)
	}
	// The journal keeps the chain across an agent restart.
	again := piece(t, "ann", 1, "c1", "p", "base2")
	again.Chain = 9
	record(again, incPiece(t, "ann", "c1", "p", 9, 1, 20, "n", "2"))
	y := NewCheckpointIndex(CheckpointConfig{Store: store, Journal: x.cfg.Journal})
	if _, err := y.Load(); err != nil {
		t.Fatal(err)
	}
	if pages := y.Pages("w1", "ann"); len(pages) != 1 || pages[0].Increments != 1 {
		t.Fatalf("pages after a reload: %+v", pages)
	}
	y.Forget("w1", "ann", 0)
	y.Flush()
	if n := store.Len(); n != 0 {
		t.Fatalf("the store holds %d packages after the person was forgotten", n)
	}
}

// A large page is checkpointed whole once, then by its writes only; a
// worker that dies wakes it on its replacement with every increment
// replayed on the whole piece.
func TestReplacementWakesFromIncrements(t *testing.T) {
	p, x, conn, user := checkpointedPool(t)
	msg := func(data string) {
		t.Helper()
		if _, err := frameOf(t, p, &protocol.Frame{User: user, Conn: conn, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p", Data: []byte(data)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := frameOf(t, p, &protocol.Frame{User: user, Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: "p", Kind: "counter"}}}); err != nil {
		t.Fatal(err)
	}
	const blob = 512 << 10
	msg(`{"op":"fill","bytes":524288}`)
	page := func() CheckpointedPage {
		t.Helper()
		if err := p.Checkpoint(t.Context(), "web-1"); err != nil {
			t.Fatal(err)
		}
		for _, pc := range x.Pages("web-1", user) {
			if pc.Page == "p" {
				return pc
			}
		}
		t.Fatal("no piece of page p")
		return CheckpointedPage{}
	}
	whole := page()
	if whole.Increments != 0 || whole.Size < blob {
		t.Fatalf("first piece: %+v, want the whole page", whole)
	}
	for round := 1; round <= 3; round++ {
		for range 2 {
			if _, err := incOf(t, p, user, conn, "p"); err != nil {
				t.Fatal(err)
			}
		}
		pc := page()
		if pc.Increments != round || pc.Size-whole.Size > round*1024 {
			t.Fatalf("round %d: %+v (whole piece %d bytes): want %d increments of a few bytes", round, pc, whole.Size, round)
		}
	}
	// Written after the last round: lost with the worker.
	if _, err := incOf(t, p, user, conn, "p"); err != nil {
		t.Fatal(err)
	}
	killAndRelaunch(t, p)
	if n, err := incOf(t, p, user, conn, "p"); err != nil || n != 7 {
		t.Fatalf("first inc after the crash: %v %v, want 7 (6 checkpointed + 1)", n, err)
	}
	// The new incarnation sends the page whole, blob and all.
	if pc := page(); pc.Increments != 0 || pc.Size < blob {
		t.Fatalf("first piece after the wake: %+v", pc)
	}
}

// A person's pieces are a slice in memory and an object keyed by
// "conn\x00page" in the journal, as they always were: a journal written
// before reads back, and one written now reads the same.
func TestCheckpointPiecesKeepTheJournalFormat(t *testing.T) {
	old := `{"u1":{"epoch":3,"pieces":{"c1\u0000p1":{"conn":"c1","page":"p1","digest":"d1","size":10,"chain":7,"incs":[{"digest":"d2","size":2}]},"c1\u0000":{"conn":"c1","digest":"d0","size":4}}}}`
	var users map[string]*ckPerson
	if err := json.Unmarshal([]byte(old), &users); err != nil {
		t.Fatal(err)
	}
	u := users["u1"]
	if u == nil || u.Epoch != 3 || len(u.Pieces) != 2 {
		t.Fatalf("read back: %+v", u)
	}
	if pc := u.Pieces.get("c1", "p1"); pc == nil || pc.Digest != "d1" || pc.Chain != 7 || len(pc.Incs) != 1 {
		t.Fatalf("the page's piece: %+v", pc)
	}
	if pc := u.Pieces.get("c1", ""); pc == nil || pc.Digest != "d0" {
		t.Fatalf("the connection's piece: %+v", pc)
	}
	again, err := json.Marshal(users)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal([]byte(old), &a)
	_ = json.Unmarshal(again, &b)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("written again:\n%s\nwant\n%s", again, old)
	}
	if pc := u.Pieces.remove("c1", "p1"); pc == nil || u.Pieces.get("c1", "p1") != nil || len(u.Pieces) != 1 {
		t.Fatalf("removing the page's piece: %+v, left %d", pc, len(u.Pieces))
	}
	if u.Pieces.remove("c1", "p1") != nil {
		t.Fatal("a piece removed twice")
	}
}
