package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Cache unpacks verified bundles into a local directory for workers to run
// from. Each bundle gets <Dir>/<hex>/: its files, read-only (files 0444,
// executables 0555, directories 0555), and its manifest.json.
//
// A bundle is unpacked into a temporary directory in Dir while it is
// verified, and renamed to <hex> only when the whole archive has been
// verified and written to disk: a directory under that name is complete.
// Opening a bundle already unpacked reads nothing from the Archive.
//
// A Cache is safe for concurrent use, also by several processes sharing Dir.
// It must not be copied after first use. Temporary directories (".tmp-*")
// left by a crash may be removed while no process uses Dir.
type Cache struct {
	// Dir holds the unpacked bundles. It is created if missing.
	Dir string
	// Archive is where bundles not yet unpacked are fetched from; nil means
	// Open finds only what is already unpacked.
	Archive Archive

	mu    sync.Mutex               // guards locks
	locks map[string]chan struct{} // per digest hex; holding it = a value sent
}

// Opened is a bundle unpacked in a Cache, verified.
type Opened struct {
	// Dir is the bundle's root: its files, and its manifest.json. It is
	// read-only; run from it, never write to it.
	Dir string
	// Manifest is the bundle's manifest.
	Manifest *Manifest
	// Digest names the bundle, "sha256:<hex>".
	Digest string
}

// EntryPath returns the path of the manifest's entry point in Dir.
func (o *Opened) EntryPath() string {
	return filepath.Join(o.Dir, filepath.FromSlash(o.Manifest.Entry))
}

// PythonPath returns the directories of a python3 bundle's python path in
// Dir, in the manifest's order (nil for another runtime).
func (o *Opened) PythonPath() []string {
	if o.Manifest.Python == nil {
		return nil
	}
	dirs := make([]string, len(o.Manifest.Python.Path))
	for i, d := range o.Manifest.Python.Path {
		dirs[i] = filepath.Join(o.Dir, filepath.FromSlash(d))
	}
	return dirs
}

// Open returns the unpacked bundle named by digest.
//
// If <Dir>/<hex>/ exists, every file is checked against the manifest there
// (size, sha256, mode, nothing missing or extra), and a copy that differs is
// refused with ErrTampered and a message saying what differs. A tampered
// copy is not fetched again on its own: it means something wrote where
// nothing may, and someone should look; Remove it to fetch afresh.
//
// Otherwise the bundle is fetched from the Archive (ErrNotFound when there is
// none, or it does not hold digest), verified while it is unpacked (see
// Verify; nothing of a bundle that fails stays behind), made read-only and
// renamed into place. Concurrent Opens of one digest, in one process or in
// several, all succeed with the same copy.
func (c *Cache) Open(ctx context.Context, digest string) (*Opened, error) {
	h, err := hexOf(digest)
	if err != nil {
		return nil, err
	}
	digest = DigestPrefix + h
	if c.Dir == "" {
		return nil, fmt.Errorf("opening bundle %s: the cache has no directory", digest)
	}
	unlock, err := c.lock(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("opening bundle %s: %w", digest, err)
	}
	defer unlock()

	final := filepath.Join(c.Dir, h)
	if _, err := os.Lstat(final); err == nil {
		return check(ctx, final, digest)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("opening bundle %s: %w", digest, err)
	}
	if c.Archive == nil {
		return nil, fmt.Errorf("%w: %s is not in the cache %s, and the cache has no archive", ErrNotFound, digest, c.Dir)
	}
	return c.fetch(ctx, digest, final)
}

// Remove deletes the unpacked copy of a bundle, if there is one, so that the
// next Open fetches it again.
func (c *Cache) Remove(ctx context.Context, digest string) error {
	h, err := hexOf(digest)
	if err != nil {
		return err
	}
	if c.Dir == "" {
		return fmt.Errorf("removing cached bundle sha256:%s: the cache has no directory", h)
	}
	unlock, err := c.lock(ctx, h)
	if err != nil {
		return fmt.Errorf("removing cached bundle sha256:%s: %w", h, err)
	}
	defer unlock()
	if err := removeTree(filepath.Join(c.Dir, h)); err != nil {
		return fmt.Errorf("removing cached bundle sha256:%s: %w", h, err)
	}
	return nil
}

// lock takes the in-process lock of one digest; other processes are dealt
// with by the rename. It returns the function that releases it.
func (c *Cache) lock(ctx context.Context, h string) (func(), error) {
	c.mu.Lock()
	if c.locks == nil {
		c.locks = map[string]chan struct{}{}
	}
	l, ok := c.locks[h]
	if !ok {
		l = make(chan struct{}, 1)
		c.locks[h] = l
	}
	c.mu.Unlock()
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fetch unpacks a bundle from the archive into final.
func (c *Cache) fetch(ctx context.Context, digest, final string) (*Opened, error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("opening bundle %s: %w", digest, err)
	}
	tmp, err := os.MkdirTemp(c.Dir, ".tmp-"+filepath.Base(final)[:12]+"-")
	if err != nil {
		return nil, fmt.Errorf("opening bundle %s: %w", digest, err)
	}
	defer func() {
		if tmp != "" {
			_ = removeTree(tmp)
		}
	}()

	rc, err := c.Archive.Open(ctx, digest)
	if err != nil {
		return nil, fmt.Errorf("fetching into cache %s: %w", c.Dir, err)
	}
	m, raw, err := verify(ctxReader{ctx, rc}, digest, func(f File, content io.Reader) error {
		return writeCached(tmp, f, content)
	})
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("fetching from archive %s into cache %s: %w", c.Archive, c.Dir, err)
	}
	if err := writeCached(tmp, File{Path: ManifestName, Mode: ModePlain}, bytes.NewReader(raw)); err != nil {
		return nil, fmt.Errorf("unpacking bundle %s: %w", digest, err)
	}
	if err := seal(tmp, m); err != nil {
		return nil, fmt.Errorf("unpacking bundle %s: %w", digest, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Lstat(final); serr == nil {
			// Another process unpacked it first: use its copy.
			return check(ctx, final, digest)
		}
		return nil, fmt.Errorf("unpacking bundle %s: %w", digest, err)
	}
	tmp = ""
	if err := syncDir(c.Dir); err != nil {
		return nil, fmt.Errorf("unpacking bundle %s: %w", digest, err)
	}
	return &Opened{Dir: final, Manifest: m, Digest: digest}, nil
}

// writeCached writes one file under root, durably, writable only by its
// owner until seal.
func writeCached(root string, f File, content io.Reader) error {
	p := filepath.Join(root, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, content); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// cachedMode is the mode of an unpacked file: no write bits.
func cachedMode(m FileMode) fs.FileMode {
	if m == ModeExec {
		return 0o555
	}
	return 0o444
}

// seal makes an unpacked tree read-only and fsyncs its directories.
func seal(root string, m *Manifest) error {
	for _, f := range append([]File{{Path: ManifestName, Mode: ModePlain}}, m.Files...) {
		if err := os.Chmod(filepath.Join(root, filepath.FromSlash(f.Path)), cachedMode(f.Mode)); err != nil {
			return err
		}
	}
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return err
	})
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o555); err != nil {
			return err
		}
	}
	return nil
}

// removeTree removes a tree made read-only by seal.
func removeTree(root string) error {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(root)
}

// check verifies an unpacked copy against its manifest.
func check(ctx context.Context, dir, digest string) (*Opened, error) {
	refuse := func(format string, args ...any) error {
		return &refusal{
			msg: fmt.Sprintf("cached bundle %s (%s): %s; the cached copy changed after it was verified, so it is refused and not fetched again on its own: remove %s to fetch a fresh copy",
				digest, dir, fmt.Sprintf(format, args...), dir),
			kind: ErrTampered,
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, refuse("%s is missing", ManifestName)
	}
	if err != nil {
		return nil, fmt.Errorf("opening cached bundle %s: %w", digest, err)
	}
	m, err := decodeManifest(raw)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return nil, refuse("%s: %v", ManifestName, err)
	}

	listed := make(map[string]File, len(m.Files))
	dirs := map[string]bool{}
	for _, f := range m.Files {
		listed[f.Path] = f
		for _, d := range parents(f.Path) {
			dirs[d] = true
		}
	}
	seen := map[string]bool{}
	var problem error
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode()
		switch {
		case mode.IsDir():
			if rel != "." && !dirs[rel] {
				problem = refuse("directory %s: not in the bundle", rel)
			} else if mode.Perm() != 0o555 {
				problem = refuse("directory %s: mode %04o, want 0555", rel, mode.Perm())
			}
		case !mode.IsRegular():
			problem = refuse("%s: a %s, not a regular file", rel, kindOf(mode))
		case rel == ManifestName:
			if mode.Perm() != 0o444 {
				problem = refuse("%s: mode %04o, want 0444", rel, mode.Perm())
			}
		default:
			f, ok := listed[rel]
			if !ok {
				problem = refuse("file %s: not in the bundle", rel)
				break
			}
			seen[rel] = true
			if want := cachedMode(f.Mode); mode.Perm() != want {
				problem = refuse("file %s: mode %04o, want %04o", rel, mode.Perm(), want)
			} else if fi.Size() != f.Size {
				problem = refuse("file %s: size mismatch (manifest %d, on disk %d bytes)", rel, f.Size, fi.Size())
			} else if sum, _, err := hashFile(p); err != nil {
				return err
			} else if sum != f.SHA256 {
				problem = refuse("file %s: sha256 mismatch (manifest %s, on disk %s)", rel, short(f.SHA256), short(sum))
			}
		}
		if problem != nil {
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checking cached bundle %s: %w", digest, err)
	}
	if problem != nil {
		return nil, problem
	}
	for _, f := range m.Files {
		if !seen[f.Path] {
			return nil, refuse("file %s: missing", f.Path)
		}
	}
	return &Opened{Dir: dir, Manifest: m, Digest: digest}, nil
}
