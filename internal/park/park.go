// Package park stores parked state packages: content-addressed by their
// SHA-256, checksummed on every read, written so that a package is either
// wholly present under its name or absent (temporary name, fsync, rename).
// It knows nothing of what a package holds.
package park

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Store holds packages.
type Store interface {
	// Put stores b and returns its digest ("sha256:<hex>"). With sync, the
	// package survives a machine crash once Put returns (file and directory
	// fsynced); without, it survives the process, which is enough for a
	// package that only stands in for a worker's memory.
	Put(b []byte, sync bool) (string, error)
	// Get returns the package with the given digest, verified; ErrNotFound
	// or ErrCorrupt otherwise.
	Get(digest string) ([]byte, error)
	// Delete removes a package; deleting what is absent is not an error.
	Delete(digest string) error
	// Has reports whether a package is present (its content is checked
	// only when read).
	Has(digest string) bool
	// Sync makes every package written so far survive a machine crash: one
	// flush for many unsynced Puts.
	Sync() error
}

var (
	// ErrNotFound is returned for a digest the store does not hold.
	ErrNotFound = errors.New("parked package not found")
	// ErrCorrupt is returned when a package's bytes do not match its digest.
	ErrCorrupt = errors.New("parked package is corrupt")
	// ErrBadDigest is returned for a digest that is not "sha256:<64 hex>".
	ErrBadDigest = errors.New("bad package digest")
)

// digestPiece bounds what one call hashes: hashing is a call the runtime
// cannot preempt, and a package of 100 MB hashed whole holds up a garbage
// collection for its 50 ms.
const digestPiece = 1 << 20

// Digest returns the digest of b.
func Digest(b []byte) string {
	h := sha256.New()
	for len(b) > 0 {
		n := min(len(b), digestPiece)
		h.Write(b[:n])
		b = b[n:]
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// DigestOfSum is the digest of a package whose SHA-256 is sum, or "" if
// sum is not one.
func DigestOfSum(sum []byte) string {
	if len(sum) != sha256.Size {
		return ""
	}
	return "sha256:" + hex.EncodeToString(sum)
}

// orDigest is digest, or b's digest if digest is empty.
func orDigest(b []byte, digest string) string {
	if digest != "" {
		return digest
	}
	return Digest(b)
}

func hexOf(digest string) (string, error) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != 64 {
		return "", fmt.Errorf("%w: %q", ErrBadDigest, digest)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("%w: %q", ErrBadDigest, digest)
	}
	return h, nil
}

// FileStore keeps packages as files in a directory.
type FileStore struct{ dir string }

var _ Store = (*FileStore)(nil)

// NewFileStore opens (creating) a store in dir.
func NewFileStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating park dir: %w", err)
	}
	return &FileStore{dir: dir}, nil
}

// Put writes b under its digest: to a temporary name, fsync (with sync),
// rename, fsync of the directory (with sync). A package already present is
// not rewritten. Either way the name appears only when the content is whole.
func (s *FileStore) Put(b []byte, sync bool) (string, error) {
	d := Digest(b)
	h, _ := hexOf(d)
	final := filepath.Join(s.dir, h)
	if _, err := os.Stat(final); err == nil {
		if sync {
			// Written earlier without fsync: make it durable now.
			if err := syncFile(final); err != nil {
				return "", fmt.Errorf("parking package: %w", err)
			}
			if err := syncDir(s.dir); err != nil {
				return "", fmt.Errorf("parking package: %w", err)
			}
		}
		return d, nil
	}
	f, err := os.CreateTemp(s.dir, ".tmp-"+h[:12]+"-*")
	if err != nil {
		return "", fmt.Errorf("parking package: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", fmt.Errorf("parking package: %w", err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return "", fmt.Errorf("parking package: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("parking package: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("parking package: %w", err)
	}
	if sync {
		if err := syncDir(s.dir); err != nil {
			return "", fmt.Errorf("parking package: %w", err)
		}
	}
	return d, nil
}

// Get reads and verifies a package.
func (s *FileStore) Get(digest string) ([]byte, error) {
	h, err := hexOf(digest)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(s.dir, h))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, digest)
	}
	if err != nil {
		return nil, fmt.Errorf("reading parked package: %w", err)
	}
	if Digest(b) != digest {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, digest)
	}
	return b, nil
}

// Has reports whether the package's file is present.
func (s *FileStore) Has(digest string) bool {
	h, err := hexOf(digest)
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(s.dir, h))
	return err == nil
}

// Sync flushes the file system holding the store (syncfs on Linux), then
// the directory: one flush for many packages written without fsync.
func (s *FileStore) Sync() error {
	if err := syncFS(s.dir); err != nil {
		return fmt.Errorf("flushing parked packages: %w", err)
	}
	return syncDir(s.dir)
}

// Delete removes a package.
func (s *FileStore) Delete(digest string) error {
	h, err := hexOf(digest)
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(s.dir, h)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deleting parked package: %w", err)
	}
	return nil
}

// WriteSynced writes b to path and fsyncs it (not the directory).
func WriteSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// SyncDir fsyncs a directory, making the names in it durable.
func SyncDir(dir string) error { return syncDir(dir) }

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// MemStore keeps packages in memory (dev mode, tests).
type MemStore struct {
	mu sync.Mutex // guards m
	m  map[string][]byte
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore { return &MemStore{m: map[string][]byte{}} }

func (s *MemStore) Put(b []byte, _ bool) (string, error) {
	d := Digest(b)
	s.mu.Lock()
	s.m[d] = append([]byte(nil), b...)
	s.mu.Unlock()
	return d, nil
}

func (s *MemStore) Get(digest string) ([]byte, error) {
	if _, err := hexOf(digest); err != nil {
		return nil, err
	}
	s.mu.Lock()
	b, ok := s.m[digest]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, digest)
	}
	if Digest(b) != digest {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, digest)
	}
	return b, nil
}

func (s *MemStore) Has(digest string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[digest]
	return ok
}

func (s *MemStore) Sync() error { return nil }

// Len is how many packages the store holds.
func (s *MemStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *MemStore) Delete(digest string) error {
	s.mu.Lock()
	delete(s.m, digest)
	s.mu.Unlock()
	return nil
}
