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

// A pack is many packages in one file, written at once: a stop parks a
// hundred thousand people in one file and one fsync instead of a hundred
// thousand files (creating a file costs far more than writing its bytes).
// The file is written under a temporary name and renamed once whole, so a
// pack is either complete or absent. Its entries are read in place; the
// file is removed when the last of them is deleted.
//
// Format: the magic, then entries of a 32-byte SHA-256, an 8-byte
// big-endian length and the bytes. Each entry is checked against its
// digest when read.

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
	f    *os.File

	mu      sync.Mutex // guards entries
	entries map[string]packEntry
}

type packEntry struct {
	off int64 // of the bytes
	n   int64
}

// writePack writes pkgs (digest → bytes) as a new pack in dir, fsynced
// (file and directory) when sync is set, and opens it.
func writePack(dir string, pkgs map[string][]byte, sync bool) (*pack, error) {
	name := fmt.Sprintf("%s%s-%d%s", packPrefix, time.Now().UTC().Format("20060102T150405.000000000Z"), len(pkgs), packSuffix)
	tmp, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return nil, fmt.Errorf("writing a pack of packages: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	w := bufio.NewWriterSize(tmp, 1<<20)
	p := &pack{path: filepath.Join(dir, name), entries: make(map[string]packEntry, len(pkgs))}
	off := int64(len(packMagic))
	if _, err := w.WriteString(packMagic); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("writing a pack of packages: %w", err)
	}
	var head [entryHead]byte
	for d, b := range pkgs {
		h, err := hexOf(d)
		if err != nil {
			tmp.Close()
			return nil, err
		}
		if _, err := hex.Decode(head[:sha256.Size], []byte(h)); err != nil {
			tmp.Close()
			return nil, fmt.Errorf("%w: %q", ErrBadDigest, d)
		}
		binary.BigEndian.PutUint64(head[sha256.Size:], uint64(len(b)))
		if _, err := w.Write(head[:]); err != nil {
			tmp.Close()
			return nil, fmt.Errorf("writing a pack of packages: %w", err)
		}
		if _, err := w.Write(b); err != nil {
			tmp.Close()
			return nil, fmt.Errorf("writing a pack of packages: %w", err)
		}
		p.entries[d] = packEntry{off: off + entryHead, n: int64(len(b))}
		off += entryHead + int64(len(b))
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("writing a pack of packages: %w", err)
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return nil, fmt.Errorf("writing a pack of packages: %w", err)
		}
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("writing a pack of packages: %w", err)
	}
	if err := os.Rename(tmp.Name(), p.path); err != nil {
		return nil, fmt.Errorf("naming a pack of packages: %w", err)
	}
	if sync {
		if err := syncDir(dir); err != nil {
			return nil, err
		}
	}
	if p.f, err = os.Open(p.path); err != nil {
		return nil, fmt.Errorf("opening a pack of packages: %w", err)
	}
	return p, nil
}

// openPack reads the entries of a pack file.
func openPack(path string) (*pack, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening a pack of packages: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening a pack of packages: %w", err)
	}
	size := fi.Size()
	r := bufio.NewReaderSize(f, 1<<16)
	magic := make([]byte, len(packMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != packMagic {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a pack of packages", ErrCorrupt, filepath.Base(path))
	}
	p := &pack{path: path, f: f, entries: map[string]packEntry{}}
	off := int64(len(packMagic))
	var head [entryHead]byte
	for off < size {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %s ends inside an entry", ErrCorrupt, filepath.Base(path))
		}
		n := int64(binary.BigEndian.Uint64(head[sha256.Size:]))
		if n < 0 || n > maxPackEntry || off+entryHead+n > size {
			f.Close()
			return nil, fmt.Errorf("%w: %s has an entry past its end", ErrCorrupt, filepath.Base(path))
		}
		d := "sha256:" + hex.EncodeToString(head[:sha256.Size])
		p.entries[d] = packEntry{off: off + entryHead, n: n}
		if _, err := r.Discard(int(n)); err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %s ends inside an entry", ErrCorrupt, filepath.Base(path))
		}
		off += entryHead + n
	}
	return p, nil
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

// drop forgets an entry; empty reports that none is left (the file can go).
func (p *pack) drop(d string) (held, empty bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.entries[d]; !ok {
		return false, false
	}
	delete(p.entries, d)
	return true, len(p.entries) == 0
}

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
