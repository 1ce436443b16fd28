package bundle

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
)

// MemArchive keeps bundles in memory: for tests, and for tools that pack and
// open a bundle in one process. The zero value is not usable; call
// NewMemArchive.
type MemArchive struct {
	mu sync.Mutex // guards bundles
	// bundles maps a digest's hex to the archive's bytes.
	bundles map[string][]byte
}

var _ Archive = (*MemArchive)(nil)

// NewMemArchive returns an empty, writable in-memory archive.
func NewMemArchive() *MemArchive {
	return &MemArchive{bundles: map[string][]byte{}}
}

// String names the archive, for messages.
func (a *MemArchive) String() string { return "(in memory)" }

// Put verifies and keeps the bundle.
func (a *MemArchive) Put(ctx context.Context, digest string, r io.Reader) error {
	h, err := hexOf(digest)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if _, _, err := verify(io.TeeReader(ctxReader{ctx, r}, &buf), digest, nil); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.bundles[h]; !ok {
		a.bundles[h] = buf.Bytes()
	}
	return nil
}

// Open returns a reader of the kept bytes.
func (a *MemArchive) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	h, err := hexOf(digest)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.bundles[h]
	if !ok {
		return nil, fmt.Errorf("%w: sha256:%s in the in-memory archive", ErrNotFound, h)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// List describes the kept bundles.
func (a *MemArchive) List(ctx context.Context) ([]Entry, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	entries := []Entry{}
	for h, b := range a.bundles {
		entries = append(entries, readEntry(DigestPrefix+h, int64(len(b)), bytes.NewReader(b)))
	}
	sortEntries(entries)
	return entries, nil
}
