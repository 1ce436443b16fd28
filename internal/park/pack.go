package park

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// A pack is many packages in one file, appended one after the other: a
// stop parks a hundred thousand people with one write each and one fsync
// instead of a hundred thousand files (creating a file costs far more than
// writing its bytes). Packages are appended before the maps point to them,
// so an agent killed while parking finds on restart every package the
// maps name; a machine crash can cut the last entries short (they were not
// fsynced yet), and opening the pack keeps the entries before the cut.
// Entries are read in place, each checked against its digest; the file is
// removed when the last of them is deleted.
//
// Format: the magic, then entries of a 32-byte SHA-256, an 8-byte
// big-endian length and the bytes.

const (
	packMagic  = "STKPACK1"
	packPrefix = "pack-"
	packSuffix = ".pk"
	entryHead  = sha256.Size + 8
)

// maxPackEntry bounds one entry's length as read back (a damaged length
// must not make the reader allocate without bound).
const maxPackEntry = 1 << 34

type pack struct {
	path string
	f    *os.File // read with ReadAt; appended to while open

	mu      sync.Mutex // guards entries, size, open
	entries map[string]packEntry
	size    int64
	open    bool // still taking appends
	synced  bool // fsynced since its last append
}

type packEntry struct {
	off int64 // of the bytes
	n   int64
}

// newPack creates an empty pack in dir, open for appends.
func newPack(dir string) (*pack, error) {
	name := fmt.Sprintf("%s%s%s", packPrefix, time.Now().UTC().Format("20060102T150405.000000000Z"), packSuffix)
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating a pack of packages: %w", err)
	}
	if _, err := f.WriteString(packMagic); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("creating a pack of packages: %w", err)
	}
	return &pack{path: path, f: f, entries: map[string]packEntry{}, size: int64(len(packMagic)), open: true}, nil
}

// append writes b under d at the pack's end.
func (p *pack) append(d string, b []byte) error {
	h, err := hexOf(d)
	if err != nil {
		return err
	}
	buf := make([]byte, entryHead, entryHead+len(b))
	if _, err := hex.Decode(buf[:sha256.Size], []byte(h)); err != nil {
		return fmt.Errorf("%w: %q", ErrBadDigest, d)
	}
	binary.BigEndian.PutUint64(buf[sha256.Size:], uint64(len(b)))
	buf = append(buf, b...) // one write: an entry is never split by another
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.open {
		return errPackClosed
	}
	if _, err := p.f.Write(buf); err != nil {
		return fmt.Errorf("writing a parked package: %w", err)
	}
	p.entries[d] = packEntry{off: p.size + entryHead, n: int64(len(b))}
	p.size += int64(len(buf))
	p.synced = false
	return nil
}

// full reports whether the pack has grown past packRotate.
func (p *pack) full() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size > packRotate
}

// close ends the pack's appends without a flush.
func (p *pack) close() {
	p.mu.Lock()
	p.open = false
	p.mu.Unlock()
}

// empty reports whether no entry is left.
func (p *pack) empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries) == 0
}

// seal ends the pack's appends and fsyncs it (once).
func (p *pack) seal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = false
	if p.synced {
		return nil
	}
	p.synced = true
	if err := p.f.Sync(); err != nil {
		return fmt.Errorf("flushing a pack of packages: %w", err)
	}
	return nil
}

// openPack reads the entries of a pack file. A last entry cut short (a
// machine crash before the pack's fsync) is left out: cut reports it.
func openPack(path string) (p *pack, cut bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("opening a pack of packages: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, false, fmt.Errorf("opening a pack of packages: %w", err)
	}
	size := fi.Size()
	r := bufio.NewReaderSize(f, 1<<16)
	magic := make([]byte, len(packMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != packMagic {
		f.Close()
		return nil, false, fmt.Errorf("%w: %s is not a pack of packages", ErrCorrupt, filepath.Base(path))
	}
	p = &pack{path: path, f: f, entries: map[string]packEntry{}, synced: true}
	off := int64(len(packMagic))
	var head [entryHead]byte
	for off < size {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			cut = true
			break
		}
		n := int64(binary.BigEndian.Uint64(head[sha256.Size:]))
		if n < 0 || n > maxPackEntry || off+entryHead+n > size {
			cut = true
			break
		}
		d := "sha256:" + hex.EncodeToString(head[:sha256.Size])
		p.entries[d] = packEntry{off: off + entryHead, n: n}
		if _, err := r.Discard(int(n)); err != nil {
			cut = true
			delete(p.entries, d)
			break
		}
		off += entryHead + n
	}
	p.size = off
	return p, cut, nil
}

func (p *pack) has(d string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.entries[d]
	return ok
}

// get reads and checks an entry; ok is false if the pack does not hold it.
func (p *pack) get(d string) (b []byte, ok bool, err error) {
	p.mu.Lock()
	e, ok := p.entries[d]
	p.mu.Unlock()
	if !ok {
		return nil, false, nil
	}
	b = make([]byte, e.n)
	if _, err := p.f.ReadAt(b, e.off); err != nil {
		return nil, true, fmt.Errorf("reading a parked package: %w", err)
	}
	if Digest(b) != d {
		return nil, true, fmt.Errorf("%w: %s", ErrCorrupt, d)
	}
	return b, true, nil
}

// drop forgets an entry; empty reports that none is left and no more will
// come (the file can go).
func (p *pack) drop(d string) (held, empty bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.entries[d]; !ok {
		return false, false
	}
	delete(p.entries, d)
	if len(p.entries) > 0 {
		return true, false
	}
	// The open pack too goes with its last entry, so that nothing of a
	// deleted package stays on disk; an append racing this one finds it
	// closed and opens another.
	p.open = false
	return true, true
}

// errPackClosed is an append to a pack closed meanwhile (rotated, or
// emptied and removed): the caller appends to a new one.
var errPackClosed = errors.New("appending to a closed pack")

func (p *pack) remove() error {
	_ = p.f.Close()
	if err := os.Remove(p.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing an emptied pack of packages: %w", err)
	}
	return nil
}

// isPack reports whether a file name in the store's directory is a pack.
func isPack(name string) bool {
	return strings.HasPrefix(name, packPrefix) && strings.HasSuffix(name, packSuffix)
}
