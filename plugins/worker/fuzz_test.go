package worker

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// A parked package (from the park store or another worker): decoding its
// trees never panics; a tree that decodes encodes back to a tree that
// decodes the same.
func FuzzPackage(f *testing.F) {
	t := newTree(nil)
	_ = t.Set("count", 3)
	_ = t.Set("note/0", "hello")
	tree, _ := encodeTree(t)
	pkg, _ := proto.Marshal(&protocol.UserPackage{Format: packageFormat, Conns: []*protocol.ConnPackage{{Name: "c", User: "u", Values: tree,
		Pages: []*protocol.PagePackage{{Id: "p", Kind: "counter", Tree: tree, Seq: 4}}}}})
	f.Add(pkg)
	f.Add(tree)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p protocol.UserPackage
		if proto.Unmarshal(b, &p) == nil {
			for _, c := range p.Conns {
				check(t, c.Values)
				for _, pg := range c.Pages {
					check(t, pg.Tree)
				}
			}
		}
		var q protocol.UserPackage
		if unmarshalPackage(b, &q) == nil {
			for _, c := range q.Conns {
				check(t, c.Values)
				for _, pg := range c.Pages {
					check(t, pg.Tree)
				}
			}
		}
		check(t, b)
	})
}

func check(t *testing.T, b []byte) {
	tr := newTree(nil)
	if decodeTree(tr, b) != nil {
		return
	}
	again, err := encodeTree(tr)
	if err != nil {
		t.Fatalf("a decoded tree does not encode: %v", err)
	}
	tr2 := newTree(nil)
	if err := decodeTree(tr2, again); err != nil {
		t.Fatalf("a re-encoded tree does not decode: %v", err)
	}
}
