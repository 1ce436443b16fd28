package park

import (
	"fmt"
	"sync"
	"time"
)

// Holder is the optional ability of a Store to keep a package in memory
// for a while: a moved person's package stands in for their worker's
// memory and is read back at their next frame, most often within seconds,
// so it need not touch the disk on the way.
type Holder interface {
	// Hold stores b like Put without sync, in memory if there is room.
	Hold(b []byte) (string, error)
}

// Tiered is a FileStore with a memory tier for held packages. A held
// package stays in memory until it is read and deleted (the person woke),
// or for at most FlushAfter, then it is written to its file like any other
// (so that an agent that crashes loses no more than its checkpoints
// would); past MaxBytes in memory, a package goes to its file at once.
// Sync writes every held package to its file before it flushes: a stop's
// packages are on disk when the park folder is named.
type Tiered struct {
	files      *FileStore
	maxBytes   int64
	flushAfter time.Duration

	mu    sync.Mutex // guards mem, bytes
	mem   map[string]held
	bytes int64
	stop  chan struct{}
	once  sync.Once
	// spills counts packages written because memory was full.
	spills uint64
}

type held struct {
	b    []byte
	when time.Time
}

var (
	_ Store  = (*Tiered)(nil)
	_ Holder = (*Tiered)(nil)
)

// NewTiered returns files with a memory tier of at most maxBytes, each
// held package flushed to its file after flushAfter. Close stops the
// flusher (held packages are written first).
func NewTiered(files *FileStore, maxBytes int64, flushAfter time.Duration) *Tiered {
	s := &Tiered{files: files, maxBytes: maxBytes, flushAfter: flushAfter, mem: map[string]held{}, stop: make(chan struct{})}
	go s.flusher()
	return s
}

// Hold implements Holder.
func (s *Tiered) Hold(b []byte) (string, error) {
	d := Digest(b)
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
	s.mu.Unlock()
	if ok {
		return h.b, nil
	}
	return s.files.Get(digest)
}

// Has implements Store.
func (s *Tiered) Has(digest string) bool {
	s.mu.Lock()
	_, ok := s.mem[digest]
	s.mu.Unlock()
	return ok || s.files.Has(digest)
}

// Delete implements Store. A held package never has a file: deleting it
// costs no disk operation.
func (s *Tiered) Delete(digest string) error {
	s.mu.Lock()
	h, ok := s.mem[digest]
	if ok {
		delete(s.mem, digest)
		s.bytes -= int64(len(h.b))
	}
	s.mu.Unlock()
	if ok {
		return nil
	}
	return s.files.Delete(digest)
}

// Sync implements Store: every held package is written, then all are
// flushed at once.
func (s *Tiered) Sync() error {
	if err := s.flush(time.Time{}); err != nil {
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

// Close writes the held packages to their files and stops the flusher.
func (s *Tiered) Close() error {
	s.once.Do(func() { close(s.stop) })
	return s.flush(time.Time{})
}

// flush writes to files the packages held since before (all of them for a
// zero before), and lets them go from memory.
func (s *Tiered) flush(before time.Time) error {
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
		if _, err := s.files.Put(h.b, false); err != nil {
			if first == nil {
				first = fmt.Errorf("writing a held package: %w", err)
			}
			continue
		}
		s.mu.Lock()
		_, still := s.mem[d]
		if still {
			delete(s.mem, d)
			s.bytes -= int64(len(h.b))
		}
		s.mu.Unlock()
		if !still {
			_ = s.files.Delete(d) // deleted while it was being written
		}
	}
	return first
}

func (s *Tiered) flusher() {
	tick := time.NewTicker(max(s.flushAfter/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			_ = s.flush(time.Now().Add(-s.flushAfter))
		}
	}
}
