package bundle

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxManifestSize bounds manifest.json.
const maxManifestSize = 8 << 20

// Verify reads a whole archive from r and checks that it is the bundle named
// by digest: that its bytes hash to digest; that it is one gzip stream
// holding one tar archive with manifest.json first and nothing after; that
// the manifest is valid; that every other entry is a regular file at a safe
// path (relative, clean, no "..", listed once) whose size, sha256 and mode
// match the manifest; and that no listed file is missing.
//
// It returns the manifest, or an error saying exactly what is wrong:
// ErrBadDigest for a malformed digest; ErrTampered for an archive that is not
// the bundle ("bundle sha256:…: file bin/app: sha256 mismatch (manifest 3f…,
// archive 9c…)"); ErrInvalidManifest for a manifest that does not validate;
// any other error is from reading r. When the bytes do not hash to digest,
// that is the error reported, whatever else is wrong.
func Verify(r io.Reader, digest string) (*Manifest, error) {
	m, _, err := verify(r, digest, nil)
	return m, err
}

// sink receives each file's content while an archive is verified: the
// reader yields exactly the file's bytes. Its work must be undone if verify
// then fails, since the whole archive is checked only at its end.
type sink func(f File, content io.Reader) error

// sinkError is a sink's own failure (a full disk, say), not the archive's.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return e.err.Error() }
func (e *sinkError) Unwrap() error { return e.err }

// readRecorder remembers the first error, other than EOF, of the reader
// under it, so that a failing read is not mistaken for a bad archive.
type readRecorder struct {
	r   io.Reader
	err error
}

func (rr *readRecorder) Read(p []byte) (int, error) {
	n, err := rr.r.Read(p)
	if err != nil && err != io.EOF && rr.err == nil {
		rr.err = err
	}
	return n, err
}

// verify is Verify, passing each file to put (when not nil) as it is read,
// and returning the manifest's bytes too.
func verify(r io.Reader, digest string, put sink) (*Manifest, []byte, error) {
	want, err := hexOf(digest)
	if err != nil {
		return nil, nil, err
	}
	name := DigestPrefix + want
	rec := &readRecorder{r: r}
	sum := sha256.New()
	// bufio.Reader is an io.ByteReader, so gzip reads no further than its
	// stream's end and what follows can be checked.
	br := bufio.NewReader(io.TeeReader(rec, sum))
	m, raw, cerr := readBundle(br, name, put)
	var se *sinkError
	if errors.As(cerr, &se) {
		return nil, nil, se.err
	}
	if rec.err == nil {
		// Hash every byte, whatever the content check found.
		_, _ = io.Copy(io.Discard, br)
	}
	if rec.err != nil {
		return nil, nil, fmt.Errorf("reading bundle %s: %w", name, rec.err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != want {
		return nil, nil, &refusal{
			msg:  fmt.Sprintf("bundle %s: the archive hashes to sha256:%s instead: it is not this bundle (corrupted, truncated or tampered)", name, got),
			kind: ErrTampered,
		}
	}
	if cerr != nil {
		return nil, nil, cerr
	}
	return m, raw, nil
}

// readBundle checks the content of an archive (not its digest).
func readBundle(br *bufio.Reader, name string, put sink) (*Manifest, []byte, error) {
	bad := func(format string, args ...any) error {
		return &refusal{msg: "bundle " + name + ": " + fmt.Sprintf(format, args...), kind: ErrTampered}
	}
	gz, err := gzip.NewReader(br)
	if err != nil {
		return nil, nil, bad("not a gzip stream: %v", err)
	}
	gz.Multistream(false)
	tr := tar.NewReader(gz)

	hdr, err := tr.Next()
	switch {
	case err == io.EOF:
		return nil, nil, bad("the archive is empty (want %s first)", ManifestName)
	case err != nil:
		return nil, nil, bad("reading the archive: %v", err)
	case hdr.Name != ManifestName:
		return nil, nil, bad("first entry is %q, want %s", hdr.Name, ManifestName)
	}
	if why := entryProblem(hdr); why != "" {
		return nil, nil, bad("entry %q: %s", hdr.Name, why)
	}
	if hdr.Size > maxManifestSize {
		return nil, nil, bad("%s is %d bytes (at most %d)", ManifestName, hdr.Size, maxManifestSize)
	}
	raw, err := io.ReadAll(tr)
	if err != nil {
		return nil, nil, bad("reading %s: %v", ManifestName, err)
	}
	m, err := decodeManifest(raw)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return nil, nil, &refusal{msg: fmt.Sprintf("bundle %s: %s: %v", name, ManifestName, err), kind: ErrInvalidManifest}
	}

	listed := make(map[string]File, len(m.Files))
	for _, f := range m.Files {
		listed[f.Path] = f
	}
	seen := map[string]bool{ManifestName: true}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, bad("reading the archive: %v", err)
		}
		if why := entryProblem(hdr); why != "" {
			return nil, nil, bad("entry %q: %s", hdr.Name, why)
		}
		if seen[hdr.Name] {
			return nil, nil, bad("entry %q: appears twice", hdr.Name)
		}
		seen[hdr.Name] = true
		f, ok := listed[hdr.Name]
		if !ok {
			return nil, nil, bad("file %s: in the archive but not in the manifest", hdr.Name)
		}
		if hdr.Mode != int64(f.Mode) {
			return nil, nil, bad("file %s: mode mismatch (manifest %s, archive %04o)", f.Path, f.Mode, hdr.Mode)
		}
		if hdr.Size != f.Size {
			return nil, nil, bad("file %s: size mismatch (manifest %d, archive %d bytes)", f.Path, f.Size, hdr.Size)
		}
		h := sha256.New()
		content := io.TeeReader(tr, h)
		if put != nil {
			if err := put(f, content); err != nil {
				return nil, nil, &sinkError{err: fmt.Errorf("unpacking bundle %s: file %s: %w", name, f.Path, err)}
			}
		}
		if _, err := io.Copy(io.Discard, content); err != nil {
			return nil, nil, bad("file %s: reading: %v", f.Path, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
			return nil, nil, bad("file %s: sha256 mismatch (manifest %s, archive %s)", f.Path, short(f.SHA256), short(got))
		}
	}
	var missing []string
	for _, f := range m.Files {
		if !seen[f.Path] {
			missing = append(missing, f.Path)
		}
	}
	switch n := len(missing); {
	case n == 1:
		return nil, nil, bad("file %s: in the manifest but missing from the archive", missing[0])
	case n > 5:
		return nil, nil, bad("files %s and %d more: in the manifest but missing from the archive", strings.Join(missing[:5], ", "), n-5)
	case n > 1:
		return nil, nil, bad("files %s: in the manifest but missing from the archive", strings.Join(missing, ", "))
	}

	// After the tar's end-of-archive marker, only zero padding; then the gzip
	// stream's end (its checksum is checked on reaching it); then nothing.
	if _, err := io.Copy(zeroWriter{}, gz); err != nil {
		if errors.Is(err, errNonZero) {
			return nil, nil, bad("data after the end of the tar archive")
		}
		return nil, nil, bad("reading the gzip stream: %v", err)
	}
	if _, err := br.Peek(1); err == nil {
		return nil, nil, bad("data after the end of the gzip stream")
	}
	return m, raw, nil
}

// entryProblem says what makes a tar entry unfit for a bundle, or "".
func entryProblem(hdr *tar.Header) string {
	switch hdr.Typeflag {
	case tar.TypeReg:
		return pathProblem(hdr.Name)
	case tar.TypeSymlink:
		return fmt.Sprintf("symlink (to %q): bundles hold only regular files", hdr.Linkname)
	case tar.TypeLink:
		return fmt.Sprintf("hard link (to %q): bundles hold only regular files", hdr.Linkname)
	case tar.TypeChar, tar.TypeBlock:
		return "device: bundles hold only regular files"
	case tar.TypeFifo:
		return "named pipe: bundles hold only regular files"
	case tar.TypeDir:
		return "directory entry: bundles hold only regular files (directories follow from their paths)"
	case tar.TypeXGlobalHeader:
		return "PAX global header: bundles hold only regular files"
	default:
		return fmt.Sprintf("entry of type %q: bundles hold only regular files", hdr.Typeflag)
	}
}

var errNonZero = errors.New("non-zero byte")

// zeroWriter accepts only zero bytes.
type zeroWriter struct{}

func (zeroWriter) Write(p []byte) (int, error) {
	for i, b := range p {
		if b != 0 {
			return i, errNonZero
		}
	}
	return len(p), nil
}
