package worker

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// A package is a UserPackage on the wire, but its trees are neither
// encoded apart and then copied into the message (proto.Marshal), nor
// copied out of it on the way in (proto.Unmarshal): the writer sizes every
// tree first and encodes each once, in place, into one buffer of the exact
// size; the reader decodes the trees from the package's own bytes. A
// package of 100 MB then costs one pass to write and one to read, each in
// pieces the runtime can preempt; what a tree keeps encoded (encoded.go)
// is written as a copy of its bytes, and a tree is read as a check and a
// copy of its own (decodeTree). The bytes are those of an ordinary
// UserPackage (protobuf allows a message's fields in any order, and the
// trees come last in theirs): anything that reads protobuf reads them.

// Field numbers of the package messages (protocol/stickyd.proto).
const (
	fieldUserConns  protowire.Number = 6
	fieldConnValues protowire.Number = 3
	fieldConnPages  protowire.Number = 4
	fieldPageTree   protowire.Number = 4
)

var errPackage = errors.New("damaged package")

// connOut is a connection on its way into a package: its small fields in
// cp (Values and Pages unset), the root of its tree (nil for none: a
// checkpoint piece of one page), and its pages.
type connOut struct {
	cp     *protocol.ConnPackage
	values any
	pages  []pageOut
}

// pageOut is a page on its way into a package: its small fields in pp
// (Tree unset) and the root of its tree.
type pageOut struct {
	pp   *protocol.PagePackage
	tree any
}

// sized is a message's small fields, encoded, and the length of the whole.
type sized struct {
	head []byte
	tree int // the tree's encoding, or -1 for none
	size int
}

func sizeTree(head []byte, num protowire.Number, root any) sized {
	if root == nil {
		return sized{head: head, tree: -1, size: len(head)}
	}
	n := sizeValue(root)
	return sized{head: head, tree: n, size: len(head) + protowire.SizeTag(num) + protowire.SizeBytes(n)}
}

// connSized is a connection sized for writing.
type connSized struct {
	sized
	pages []sized
}

func sizeConn(c connOut) (connSized, error) {
	h, err := proto.Marshal(c.cp)
	if err != nil {
		return connSized{}, err
	}
	cs := connSized{sized: sizeTree(h, fieldConnValues, c.values)}
	for _, p := range c.pages {
		h, err := proto.Marshal(p.pp)
		if err != nil {
			return connSized{}, err
		}
		ps := sizeTree(h, fieldPageTree, p.tree)
		cs.pages = append(cs.pages, ps)
		cs.size += protowire.SizeTag(fieldConnPages) + protowire.SizeBytes(ps.size)
	}
	return cs, nil
}

func appendConn(b []byte, c connOut, cs connSized) ([]byte, error) {
	b = append(b, cs.head...)
	var err error
	for j, p := range c.pages {
		ps := cs.pages[j]
		b = protowire.AppendTag(b, fieldConnPages, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(ps.size))
		b = append(b, ps.head...)
		if b, err = appendTreeField(b, fieldPageTree, p.tree, ps.tree); err != nil {
			return nil, fmt.Errorf("encoding page %q: %w", p.pp.Id, err)
		}
	}
	if b, err = appendTreeField(b, fieldConnValues, c.values, cs.tree); err != nil {
		return nil, fmt.Errorf("encoding connection %q: %w", c.cp.Name, err)
	}
	return b, nil
}

// marshalPackage writes pkg (Conns unset) with conns.
func marshalPackage(pkg *protocol.UserPackage, conns []connOut) ([]byte, error) {
	head, err := proto.Marshal(pkg)
	if err != nil {
		return nil, err
	}
	total := len(head)
	cs := make([]connSized, len(conns))
	for i, c := range conns {
		if cs[i], err = sizeConn(c); err != nil {
			return nil, err
		}
		total += protowire.SizeTag(fieldUserConns) + protowire.SizeBytes(cs[i].size)
	}
	b := make([]byte, 0, total)
	b = append(b, head...)
	for i, c := range conns {
		b = protowire.AppendTag(b, fieldUserConns, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(cs[i].size))
		if b, err = appendConn(b, c, cs[i]); err != nil {
			return nil, err
		}
	}
	return exact(b, total)
}

// marshalConn writes one ConnPackage the same way (a checkpoint piece).
func marshalConn(c connOut) ([]byte, error) {
	cs, err := sizeConn(c)
	if err != nil {
		return nil, err
	}
	b, err := appendConn(make([]byte, 0, cs.size), c, cs)
	if err != nil {
		return nil, err
	}
	return exact(b, cs.size)
}

func exact(b []byte, total int) ([]byte, error) {
	if len(b) != total {
		// The trees changed while they were written: a freeze or a
		// checkpoint runs in the person's mailbox, so this is a bug, not a
		// race to live with.
		return nil, fmt.Errorf("a package sized %d bytes was written as %d", total, len(b))
	}
	return b, nil
}

func appendTreeField(b []byte, num protowire.Number, root any, n int) ([]byte, error) {
	if n < 0 {
		return b, nil
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	start := len(b)
	b, err := appendValue(b, root)
	if err != nil {
		return nil, err
	}
	if len(b)-start != n {
		return nil, fmt.Errorf("a tree sized %d bytes was written as %d", n, len(b)-start)
	}
	return b, nil
}

// unmarshalPackage reads a package. Its trees (ConnPackage.Values and
// PagePackage.Tree) are slices of b, not copies: b must not change while
// the package is in use.
func unmarshalPackage(b []byte, pkg *protocol.UserPackage) error {
	rest, err := split(b, func(num protowire.Number, v []byte) (bool, error) {
		if num != fieldUserConns {
			return false, nil
		}
		cp := &protocol.ConnPackage{}
		if err := unmarshalConn(v, cp); err != nil {
			return true, err
		}
		pkg.Conns = append(pkg.Conns, cp)
		return true, nil
	})
	if err != nil {
		return err
	}
	conns := pkg.Conns
	if err := proto.Unmarshal(rest, pkg); err != nil {
		return err
	}
	pkg.Conns = conns
	return nil
}

func unmarshalConn(b []byte, cp *protocol.ConnPackage) error {
	var values []byte
	var pages []*protocol.PagePackage
	rest, err := split(b, func(num protowire.Number, v []byte) (bool, error) {
		switch num {
		case fieldConnValues:
			values = v
			return true, nil
		case fieldConnPages:
			pp := &protocol.PagePackage{}
			if err := unmarshalPage(v, pp); err != nil {
				return true, err
			}
			pages = append(pages, pp)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(rest, cp); err != nil {
		return err
	}
	cp.Values, cp.Pages = values, pages
	return nil
}

func unmarshalPage(b []byte, pp *protocol.PagePackage) error {
	var tree []byte
	rest, err := split(b, func(num protowire.Number, v []byte) (bool, error) {
		if num == fieldPageTree {
			tree = v
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(rest, pp); err != nil {
		return err
	}
	pp.Tree = tree
	return nil
}

// split walks a message's fields: take is offered each length-delimited
// one and says whether it took it; the others are returned, in order, for
// proto.Unmarshal.
func split(b []byte, take func(protowire.Number, []byte) (bool, error)) ([]byte, error) {
	var rest []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: %v", errPackage, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, fmt.Errorf("%w: %v", errPackage, protowire.ParseError(m))
		}
		field := b[:n+m]
		if typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(b[n:])
			if k < 0 {
				return nil, fmt.Errorf("%w: %v", errPackage, protowire.ParseError(k))
			}
			took, err := take(num, v)
			if err != nil {
				return nil, err
			}
			if took {
				b = b[n+m:]
				continue
			}
		}
		rest = append(rest, field...)
		b = b[n+m:]
	}
	return rest, nil
}
