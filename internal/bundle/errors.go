package bundle

import "errors"

var (
	// ErrBadDigest is returned for a digest that is neither
	// "sha256:<64 hex>" nor the bare 64 hex digits.
	ErrBadDigest = errors.New("bad bundle digest")
	// ErrTampered marks an archive or a cached copy that must not be used:
	// its bytes do not hash to its digest, a file differs from the manifest,
	// a file is missing or extra, or it holds what no bundle may (links,
	// devices, directories as entries, paths outside the bundle).
	ErrTampered = errors.New("bundle tampered")
	// ErrInvalidManifest is returned by Manifest.Validate, and by Verify for
	// an archive whose manifest does not validate.
	ErrInvalidManifest = errors.New("invalid manifest")
	// ErrNotFound is returned when an archive (or a cache without an
	// archive) does not hold the digest asked for.
	ErrNotFound = errors.New("bundle not found")
	// ErrReadOnly is returned by Put on an archive opened read-only.
	ErrReadOnly = errors.New("archive is read-only")
	// ErrDenied is returned when an HTTP archive refuses the token of a Put
	// (HTTP 401: none sent; 403: wrong one, or uploads disabled).
	ErrDenied = errors.New("archive refused the upload")
	// ErrTooLarge is returned when an HTTP archive refuses an upload over
	// its size limit (HTTP 413).
	ErrTooLarge = errors.New("bundle too large for the archive")
)

// refusal is the error for an archive or cached copy that does not hold what
// it should. Its message says exactly what is wrong and where; kind is the
// sentinel it matches with errors.Is.
type refusal struct {
	msg  string
	kind error
}

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return e.kind }
