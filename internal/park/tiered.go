package park

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Holder is the optional ability of a Store to keep a package in memory
// for a while: a moved person's package stands in for their worker's
// memory and is read back at their next frame, most often within seconds,
// so it need not touch the disk on the way.
type Holder interface {
	// Hold stores b like Put without sync, in memory if there is room.
	// digest, when not empty, is b's digest as the caller already
	// computed it (as the bytes arrived); empty has Hold compute it.
	Hold(b []byte, digest string) (string, error)
}

// Tiered is a FileStore with a memory tier for held packages. A held
// package stays in memory until it is read and deleted (the person woke),
// or for at most flushAfter, then it goes to disk with the others due, in
// one pack (so that an agent that crashes loses no more than its
// checkpoints would); past maxBytes in memory, a package goes to its own
// file at once. Sync writes every held package to one fsynced pack: a
// stop's packages are on disk when the park folder is named.
type Tiered struct {
	files      *FileStore
	maxBytes   int64
	flushAfter time.Duration

	mu    sync.Mutex // guards mem, bytes, packs, cur
	mem   map[string]held
	packs []*pack
	cur   *pack // the pack taking appends, sealed by Sync
	bytes int64
	stop  chan struct{}
	once  sync.Once
	// spills counts packages written because memory was full.
	spills uint64
	// setAside names the damaged packs found at open.
	setAside []string
}

// SetAside lists the damage the store found when it opened: packs that
// are not packs (renamed NAME.corrupt, never read) and packs cut short.
func (s *Tiered) SetAside() []string { return s.setAside }

type held struct {
	b    []byte
	when time.Time
}

var (
	_ Store    = (*Tiered)(nil)
	_ Holder   = (*Tiered)(nil)
	_ Appender = (*Tiered)(nil)
)

// Appender is the optional ability of a Store to write many packages
// cheaply, each durable against the process's death once Append returns
// and against a machine crash at the next Sync: a stop parks everyone
// this way.
type Appender interface {
	// Append appends b; digest is as for Hold.
	Append(b []byte, digest string) (string, error)
}

// Append implements Appender: b goes at the end of the open pack.
func (s *Tiered) Append(b []byte, digest string) (string, error) {
	d := orDigest(b, digest)
	if s.inPacks(d) {
		return d, nil
	}
	if err := s.appendPkg(d, b); err != nil {
		return "", err
	}
	s.unhold(d) // held until now: the pack has it
	return d, nil
}

// unhold lets a package go from memory, reporting whether it was held.
func (s *Tiered) unhold(d string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.mem[d]
	if ok {
		delete(s.mem, d)
		s.bytes -= int64(len(h.b))
	}
	return ok
}

func (s *Tiered) inPacks(d string) bool {
	s.mu.Lock()
	packs := s.packs
	s.mu.Unlock()
	for _, p := range packs {
		if p.has(d) {
			return true
		}
	}
	return false
}

// packRotate is the size past which the open pack takes no more appends
// and a new one is opened: a pack's file goes only with its last entry, so
// packs are kept small enough that a few long-parked people do not hold
// much disk.
var packRotate int64 = 64 << 20

// appendPkg appends to the open pack, opening one if none is (or if the
// open one has grown past packRotate).
func (s *Tiered) appendPkg(d string, b []byte) error {
	s.mu.Lock()
	cur := s.cur
	if cur != nil && cur.full() {
		cur.close()
		if cur.empty() {
			s.forgetPackLocked(cur)
			_ = cur.remove()
		}
		cur, s.cur = nil, nil
	}
	if cur == nil {
		var err error
		if cur, err = newPack(s.files.dir); err != nil {
			s.mu.Unlock()
			return err
		}
		s.cur = cur
		s.packs = append(s.packs, cur)
	}
	s.mu.Unlock()
	if err := cur.append(d, b); !errors.Is(err, errPackClosed) {
		return err
	}
	return s.appendPkg(d, b) // closed meanwhile: s.cur is another, or none
}

// NewTiered returns files with a memory tier of at most maxBytes, each
// held package flushed to disk after flushAfter, and opens the packs the
// directory holds. Close stops the flusher (held packages are written
// first).
func NewTiered(files *FileStore, maxBytes int64, flushAfter time.Duration) (*Tiered, error) {
	s := &Tiered{files: files, maxBytes: maxBytes, flushAfter: flushAfter, mem: map[string]held{}, stop: make(chan struct{})}
	entries, err := os.ReadDir(files.dir)
	if err != nil {
		return nil, fmt.Errorf("reading the park store: %w", err)
	}
	for _, e := range entries {
		if !isPack(e.Name()) {
			continue
		}
		path := filepath.Join(files.dir, e.Name())
		p, cut, err := openPack(path)
		if errors.Is(err, ErrCorrupt) {
			// Not a pack: kept aside for the operator, never read.
			_ = os.Rename(path, path+".corrupt")
			s.setAside = append(s.setAside, fmt.Sprintf("%s: %v", e.Name(), err))
			continue
		}
		if err != nil {
			for _, q := range s.packs {
				_ = q.f.Close()
			}
			return nil, err
		}
		if cut {
			// A machine crash before its fsync: the entries before the
			// cut are whole; the people of the others wake from their
			// checkpoints.
			s.setAside = append(s.setAside, fmt.Sprintf("%s: its last entry was cut short; %d entries kept", e.Name(), len(p.entries)))
		}
		if len(p.entries) == 0 {
			_ = p.remove()
			continue
		}
		s.packs = append(s.packs, p)
	}
	go s.flusher()
	return s, nil
}

// Hold implements Holder.
func (s *Tiered) Hold(b []byte, digest string) (string, error) {
	d := orDigest(b, digest)
	s.mu.Lock()
	if _, ok := s.mem[d]; ok {
		s.mu.Unlock()
		return d, nil
	}
	if s.bytes+int64(len(b)) <= s.maxBytes {
		s.mem[d] = held{b: b, when: time.Now()}
		s.bytes += int64(len(b))
		s.mu.Unlock()
		return d, nil
	}
	s.spills++
	s.mu.Unlock()
	return s.files.Put(b, false)
}

// Put implements Store: to the file, as FileStore does.
func (s *Tiered) Put(b []byte, sync bool) (string, error) {
	return s.files.Put(b, sync)
}

// Get implements Store: from memory if held, else from the file (checked).
func (s *Tiered) Get(digest string) ([]byte, error) {
	s.mu.Lock()
	h, ok := s.mem[digest]
	packs := s.packs
	s.mu.Unlock()
	if ok {
		return h.b, nil
	}
	for _, p := range packs {
		if b, ok, err := p.get(digest); ok {
			return b, err
		}
	}
	return s.files.Get(digest)
}

// Has implements Store.
func (s *Tiered) Has(digest string) bool {
	s.mu.Lock()
	_, ok := s.mem[digest]
	packs := s.packs
	s.mu.Unlock()
	if ok {
		return true
	}
	for _, p := range packs {
		if p.has(digest) {
			return true
		}
	}
	return s.files.Has(digest)
}

// Delete implements Store. A held package never has a file: deleting it
// costs no disk operation.
func (s *Tiered) Delete(digest string) error {
	if s.unhold(digest) {
		return nil
	}
	if found, err := s.dropFromPacks(digest); found {
		return err
	}
	return s.files.Delete(digest)
}

// dropFromPacks deletes digest from the pack holding it, and the pack's
// file with its last entry.
func (s *Tiered) dropFromPacks(digest string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.packs {
		held, empty := p.drop(digest)
		if !held {
			continue
		}
		if empty {
			s.packs = append(s.packs[:i], s.packs[i+1:]...)
			if s.cur == p {
				s.cur = nil
			}
			return true, p.remove()
		}
		return true, nil
	}
	return false, nil
}

// Sync implements Store: every held package is written in one pack,
// fsynced, then the files written without sync are flushed at once.
func (s *Tiered) Sync() error {
	if err := s.flush(time.Time{}, true); err != nil {
		return err
	}
	return s.files.Sync()
}

// Held reports the packages and bytes in memory, and how many packages
// went to disk at once because memory was full.
func (s *Tiered) Held() (packages int, bytes int64, spills uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mem), s.bytes, s.spills
}

// Close writes the held packages to disk, stops the flusher and closes the
// packs.
func (s *Tiered) Close() error {
	s.once.Do(func() { close(s.stop) })
	err := s.flush(time.Time{}, true)
	s.mu.Lock()
	for _, p := range s.packs {
		_ = p.f.Close()
	}
	s.packs = nil
	s.mu.Unlock()
	return err
}

// flush appends the packages held since before (all of them for a zero
// before) to the open pack and lets them go from memory; with sync, the
// pack is then sealed (fsynced) and the next append opens another.
func (s *Tiered) flush(before time.Time, sync bool) error {
	s.mu.Lock()
	var due []string
	for d, h := range s.mem {
		if before.IsZero() || h.when.Before(before) {
			due = append(due, d)
		}
	}
	s.mu.Unlock()
	var first error
	for _, d := range due {
		s.mu.Lock()
		h, ok := s.mem[d]
		s.mu.Unlock()
		if !ok {
			continue // woken and deleted meanwhile
		}
		if err := s.appendPkg(d, h.b); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if !s.unhold(d) {
			_, _ = s.dropFromPacks(d) // deleted while it was being written
		}
	}
	if first != nil || !sync {
		return first
	}
	// Every pack written since the last sync is flushed, the open one and
	// those rotated meanwhile; the next append opens a new one.
	s.mu.Lock()
	s.cur = nil
	packs := append([]*pack(nil), s.packs...)
	s.mu.Unlock()
	for _, p := range packs {
		if err := p.seal(); err != nil {
			return err
		}
	}
	if err := syncDir(s.files.dir); err != nil {
		return err
	}
	s.mu.Lock()
	var gone []*pack
	for _, p := range packs {
		if p.empty() {
			s.forgetPackLocked(p)
			gone = append(gone, p)
		}
	}
	s.mu.Unlock()
	for _, p := range gone {
		if err := p.remove(); err != nil {
			return err
		}
	}
	return nil
}

// forgetPackLocked takes p out of the packs read.
func (s *Tiered) forgetPackLocked(p *pack) {
	for i, q := range s.packs {
		if q == p {
			s.packs = append(s.packs[:i], s.packs[i+1:]...)
			return
		}
	}
}

func (s *Tiered) flusher() {
	tick := time.NewTicker(max(s.flushAfter/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			_ = s.flush(time.Now().Add(-s.flushAfter), false)
		}
	}
}
