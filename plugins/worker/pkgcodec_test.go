package worker

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// samplePackage is a package of two connections, one with two pages (one
// holding a tree of several megabytes), as marshalPackage takes it and as
// a plain protobuf message.
func samplePackage(t *testing.T) (*protocol.UserPackage, []connOut, *protocol.UserPackage) {
	t.Helper()
	trees := []*Tree{newTree(nil), newTree(nil), newTree(nil)}
	_ = trees[0].Set("blob", strings.Repeat("x", 3*copyPiece+17))
	_ = trees[0].Set("n", 4.5)
	_ = trees[1].Set("a", []any{1, "two", map[string]any{"k": nil}})
	_ = trees[2].Set("theme", "dark")
	head := func() *protocol.UserPackage {
		return &protocol.UserPackage{Format: packageFormat, User: "ann", Epoch: 7, App: "counter", AppVersion: "1"}
	}
	page := func(id string) *protocol.PagePackage {
		return &protocol.PagePackage{Id: id, Kind: "counter", Schema: 2, Seq: 40, Floor: 38, Tables: []string{"prices"},
			Pending: []*protocol.Delta{{Seq: 39, Path: "n", Value: []byte("4.5")}},
			Marks:   map[string]*protocol.TableList{"cache/x": {Tables: []string{"prices"}}}}
	}
	conns := []connOut{
		{cp: &protocol.ConnPackage{Name: "c1", User: "ann"}, values: trees[2].root,
			pages: []pageOut{{pp: page("p1"), tree: trees[0].root}, {pp: page("p2"), tree: trees[1].root}}},
		{cp: &protocol.ConnPackage{Name: "c2", User: "ann"}, values: map[string]any{}},
	}
	plain := head()
	for _, c := range conns {
		cp := proto.Clone(c.cp).(*protocol.ConnPackage)
		var err error
		if cp.Values, err = appendValue(nil, c.values); err != nil {
			t.Fatal(err)
		}
		for _, p := range c.pages {
			pp := proto.Clone(p.pp).(*protocol.PagePackage)
			if pp.Tree, err = appendValue(nil, p.tree); err != nil {
				t.Fatal(err)
			}
			cp.Pages = append(cp.Pages, pp)
		}
		plain.Conns = append(plain.Conns, cp)
	}
	return head(), conns, plain
}

// A package written in place is an ordinary UserPackage, and the reader
// reads one written by anything (the host assembles checkpoints with
// proto.Marshal).
func TestPackageCodecIsProtobuf(t *testing.T) {
	head, conns, plain := samplePackage(t)
	b, err := marshalPackage(head, conns)
	if err != nil {
		t.Fatal(err)
	}
	var std protocol.UserPackage
	if err := proto.Unmarshal(b, &std); err != nil {
		t.Fatalf("protobuf does not read a package written in place: %v", err)
	}
	if !samePackage(t, &std, plain) {
		t.Fatal("a package written in place reads back different from the same package marshalled by protobuf")
	}
	for name, in := range map[string][]byte{"in place": b, "protobuf": mustMarshal(t, plain)} {
		var got protocol.UserPackage
		if err := unmarshalPackage(in, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !samePackage(t, &got, plain) {
			t.Fatalf("%s: the package read back differs", name)
		}
		back := newTree(nil)
		if err := decodeTree(back, got.Conns[0].Pages[0].Tree); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(back.root, conns[0].pages[0].tree) {
			t.Fatalf("%s: the big tree changed on the way", name)
		}
	}
}

// samePackage compares two packages, their trees by what they hold (a
// map's entries are encoded in no set order).
func samePackage(t *testing.T, a, b *protocol.UserPackage) bool {
	t.Helper()
	trees := func(p *protocol.UserPackage) (*protocol.UserPackage, []any) {
		p = proto.Clone(p).(*protocol.UserPackage)
		var out []any
		decode := func(b []byte) any {
			tr := newTree(nil)
			if err := decodeTree(tr, b); err != nil {
				t.Fatal(err)
			}
			return tr.root
		}
		for _, c := range p.Conns {
			out = append(out, decode(c.Values))
			c.Values = nil
			for _, pg := range c.Pages {
				out = append(out, decode(pg.Tree))
				pg.Tree = nil
			}
		}
		return p, out
	}
	pa, ta := trees(a)
	pb, tb := trees(b)
	return proto.Equal(pa, pb) && reflect.DeepEqual(ta, tb)
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A tree holding what is not a tree value is an error, not a package.
func TestPackageCodecRefusesForeignValues(t *testing.T) {
	head, conns, _ := samplePackage(t)
	conns[0].pages[1].tree = map[string]any{"ch": make(chan int)}
	if _, err := marshalPackage(head, conns); err == nil {
		t.Fatal("a tree holding a channel was packaged")
	}
}

// Every cut of a package is an error or a package, never a panic.
func TestPackageCodecRejectsDamage(t *testing.T) {
	head, conns, _ := samplePackage(t)
	b, err := marshalPackage(head, conns)
	if err != nil {
		t.Fatal(err)
	}
	errs := 0
	for _, n := range []int{1, 2, 5, 9, 20, 40, 100, len(b) / 2, len(b) - 1} {
		var got protocol.UserPackage
		if unmarshalPackage(b[:n], &got) != nil {
			errs++
		}
	}
	if errs == 0 {
		t.Fatal("no truncated package was refused")
	}
}
