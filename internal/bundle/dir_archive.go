package bundle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// DirArchive keeps bundles as files in one directory, <dir>/<hex>.tar.gz,
// each written to a temporary name, fsynced, made read-only (0444) and
// renamed into place, then the directory fsynced: a bundle is either wholly
// present under its name or absent. Files are verified when put, not when
// opened. Several processes may share the directory.
type DirArchive struct {
	dir      string
	readOnly bool
}

var _ Archive = (*DirArchive)(nil)

// NewDirArchive opens the directory archive in dir. A read-only archive's
// directory must exist and is never written; a writable one's is created if
// missing.
func NewDirArchive(dir string, readOnly bool) (*DirArchive, error) {
	if dir == "" {
		return nil, errors.New("opening archive: empty directory name")
	}
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return nil, fmt.Errorf("opening archive %s: not a directory", dir)
	case errors.Is(err, os.ErrNotExist) && !readOnly:
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("opening archive %s: %w", dir, err)
		}
	case err != nil:
		return nil, fmt.Errorf("opening archive %s: %w", dir, err)
	}
	return &DirArchive{dir: dir, readOnly: readOnly}, nil
}

// Dir returns the archive's directory.
func (a *DirArchive) Dir() string { return a.dir }

// String returns the archive's directory, for messages.
func (a *DirArchive) String() string { return a.dir }

// Put verifies the bundle read from r while writing it to a temporary file,
// and renames it into place only if it is whole and valid.
func (a *DirArchive) Put(ctx context.Context, digest string, r io.Reader) error {
	_, _, err := a.put(ctx, digest, r)
	return err
}

// put is Put, also saying whether the bundle is new and what its manifest is.
func (a *DirArchive) put(ctx context.Context, digest string, r io.Reader) (created bool, m *Manifest, err error) {
	if a.readOnly {
		return false, nil, fmt.Errorf("putting bundle into %s: %w", a.dir, ErrReadOnly)
	}
	h, err := hexOf(digest)
	if err != nil {
		return false, nil, err
	}
	tmp, err := os.CreateTemp(a.dir, ".tmp-"+h[:12]+"-*")
	if err != nil {
		return false, nil, fmt.Errorf("putting bundle into %s: %w", a.dir, err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	m, _, err = verify(io.TeeReader(ctxReader{ctx, r}, tmp), digest, nil)
	if err != nil {
		tmp.Close()
		return false, nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, nil, fmt.Errorf("putting bundle into %s: %w", a.dir, err)
	}
	if err := tmp.Close(); err != nil {
		return false, nil, fmt.Errorf("putting bundle into %s: %w", a.dir, err)
	}
	final := filepath.Join(a.dir, h+".tar.gz")
	if _, err := os.Stat(final); err == nil {
		return false, m, nil
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return false, nil, fmt.Errorf("putting bundle into %s: %w", a.dir, err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return false, nil, fmt.Errorf("putting bundle into %s: %w", a.dir, err)
	}
	if err := syncDir(a.dir); err != nil {
		return false, nil, fmt.Errorf("putting bundle into %s: %w", a.dir, err)
	}
	return true, m, nil
}

// Open opens <dir>/<hex>.tar.gz.
func (a *DirArchive) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	h, err := hexOf(digest)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(a.dir, h+".tar.gz"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: sha256:%s in archive %s", ErrNotFound, h, a.dir)
	}
	if err != nil {
		return nil, fmt.Errorf("opening bundle sha256:%s in archive %s: %w", h, a.dir, err)
	}
	return f, nil
}

// List reads the manifest of every <hex>.tar.gz in the directory; other
// files (temporary ones among them) are ignored.
func (a *DirArchive) List(ctx context.Context) ([]Entry, error) {
	des, err := os.ReadDir(a.dir)
	if err != nil {
		return nil, fmt.Errorf("listing archive %s: %w", a.dir, err)
	}
	entries := []Entry{}
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h, ok := strings.CutSuffix(de.Name(), ".tar.gz")
		if !ok || len(h) != 64 || !isLowerHex(h) || !de.Type().IsRegular() {
			continue
		}
		e, err := a.entry(h)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // removed since ReadDir
			}
			return nil, fmt.Errorf("listing archive %s: %w", a.dir, err)
		}
		entries = append(entries, e)
	}
	sortEntries(entries)
	return entries, nil
}

// entry describes the bundle in <dir>/<h>.tar.gz.
func (a *DirArchive) entry(h string) (Entry, error) {
	f, err := os.Open(filepath.Join(a.dir, h+".tar.gz"))
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Entry{}, err
	}
	return readEntry(DigestPrefix+h, fi.Size(), f), nil
}

// syncDir fsyncs a directory, making the names in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
