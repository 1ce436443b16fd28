package bundle

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
)

// Archive is where bundles are kept, by digest: the shared archive every
// agent fetches from.
type Archive interface {
	// Put stores the bundle read from r under digest. It reads r whole and
	// verifies it (see Verify) before anything is stored, so a bad upload
	// leaves no trace. Putting a bundle already held succeeds (the upload is
	// still verified). It returns ErrReadOnly on an archive opened
	// read-only, without reading r.
	Put(ctx context.Context, digest string, r io.Reader) error
	// Open returns the archive's bytes for digest as stored, not verified:
	// pass them to Verify (Cache.Open does). The caller closes it. It
	// returns ErrNotFound when the archive does not hold digest.
	Open(ctx context.Context, digest string) (io.ReadCloser, error)
	// List describes every bundle held, sorted by name, version and digest.
	// The descriptions come from each archive's manifest.json, which List
	// does not verify.
	List(ctx context.Context) ([]Entry, error)
}

// Entry describes one bundle of an archive, as List returns it and as an
// HTTP archive's index.json lists it.
type Entry struct {
	// Digest names the bundle, "sha256:<hex>".
	Digest string `json:"digest"`
	// Size of the archive in bytes.
	Size int64 `json:"size"`
	// Name, Version and Runtime are the manifest's.
	Name    string `json:"name"`
	Version string `json:"version"`
	Runtime string `json:"runtime"`
	// Problem says why the manifest could not be read, when it could not;
	// Name, Version and Runtime are then empty.
	Problem string `json:"problem,omitempty"`
}

// ArchiveOptions are the options of OpenArchive.
type ArchiveOptions struct {
	// ReadOnly makes Put return ErrReadOnly. Agents open archives so: they
	// only fetch.
	ReadOnly bool
	// Token is sent as "Authorization: Bearer <token>" with every request to
	// an HTTP archive. Directory archives ignore it.
	Token string
	// HTTPClient makes an HTTP archive's requests; nil means
	// http.DefaultClient. Requests are bounded by the context given to each
	// call, not by a client timeout.
	HTTPClient *http.Client
}

// OpenArchive opens the archive at location:
//
//   - a directory path, or a file:// URL (file:///srv/bundles): a directory
//     archive (see DirArchive). It must exist when ReadOnly; otherwise it is
//     created if missing.
//   - an http:// or https:// URL: an HTTP archive (see HTTPArchive), such as
//     one served by Handler.
//
// Any other scheme is an error.
func OpenArchive(location string, opts ArchiveOptions) (Archive, error) {
	switch {
	case location == "":
		return nil, errors.New("opening archive: no location given (want a directory, file:// or http(s):// URL)")
	case strings.HasPrefix(location, "http://"), strings.HasPrefix(location, "https://"):
		return NewHTTPArchive(location, opts)
	case strings.HasPrefix(location, "file:"):
		u, err := url.Parse(location)
		if err != nil {
			return nil, fmt.Errorf("opening archive %q: %w", location, err)
		}
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("opening archive %q: file URLs must name a local path (file:///srv/bundles)", location)
		}
		if u.Path == "" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("opening archive %q: file URLs need an absolute path (file:///srv/bundles)", location)
		}
		return NewDirArchive(u.Path, opts.ReadOnly)
	case strings.Contains(location, "://"):
		return nil, fmt.Errorf("opening archive %q: unsupported scheme (want a directory, file:// or http(s):// URL)", location)
	default:
		return NewDirArchive(location, opts.ReadOnly)
	}
}

// readEntry describes an archive from its first entry, manifest.json,
// without verifying the archive.
func readEntry(digest string, size int64, r io.Reader) Entry {
	e := Entry{Digest: digest, Size: size}
	m, err := readManifest(r)
	if err != nil {
		e.Problem = err.Error()
		return e
	}
	e.Name, e.Version, e.Runtime = m.Name, m.Version, m.Runtime
	return e
}

// readManifest reads an archive's first entry, manifest.json, and decodes
// it; nothing is verified.
func readManifest(r io.Reader) (*Manifest, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("not a gzip stream: %v", err)
	}
	tr := tar.NewReader(gz)
	hdr, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("reading the archive: %v", err)
	}
	if hdr.Name != ManifestName || hdr.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("first entry is %q, want %s", hdr.Name, ManifestName)
	}
	if hdr.Size > maxManifestSize {
		return nil, fmt.Errorf("%s is %d bytes (at most %d)", ManifestName, hdr.Size, maxManifestSize)
	}
	raw, err := io.ReadAll(tr)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %v", ManifestName, err)
	}
	return decodeManifest(raw)
}

// sortEntries orders entries by name, version, then digest.
func sortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Digest < b.Digest
	})
}

// ctxReader fails reads once its context is done, so that a long copy from
// a reader that knows no context stops.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
