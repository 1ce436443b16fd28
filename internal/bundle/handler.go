package bundle

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// DefaultMaxSize is the largest upload a Handler accepts unless told
// otherwise: 1 GiB.
const DefaultMaxSize int64 = 1 << 30

// HandlerOptions are the options of Handler.
type HandlerOptions struct {
	// Token is the bearer token an upload (PUT) must carry. Empty disables
	// uploads: every PUT is answered 403.
	Token string
	// MaxSize is the largest upload accepted, in bytes; zero means
	// DefaultMaxSize.
	MaxSize int64
	// Logger gets a line for each bundle stored and each request that fails
	// on the server's side; nil discards them.
	Logger hclog.Logger
}

// Handler serves the directory archive in dir (which must exist) over HTTP,
// at the root of the handler's path space (use http.StripPrefix to mount it
// elsewhere):
//
//	GET, HEAD /<hex>.tar.gz         the bundle, immutable (Range and ETag work),
//	                                so a plain download or a Nomad artifact
//	                                stanza (go-getter) can fetch and unpack it
//	GET, HEAD /<hex>.tar.gz.sha256  "<hex>  <hex>.tar.gz\n", the checksum file
//	                                go-getter reads with checksum = "file:<url>"
//	GET, HEAD /index.json           {"bundles": [Entry, ...]}
//	PUT /<hex>.tar.gz               stores a bundle, verified first
//
// A PUT without "Authorization: Bearer <token>" gets 401, with a wrong token
// (or when no token is configured) 403, over the size limit 413, a bundle
// that fails Verify 400 with Verify's message; a stored bundle 201 (200 if
// already held) with its Entry. Errors are JSON: {"error": "<message>"}.
func Handler(dir string, opts HandlerOptions) http.Handler {
	h := &handler{
		archive: &DirArchive{dir: dir},
		token:   opts.Token,
		max:     opts.MaxSize,
		log:     opts.Logger,
	}
	if h.max <= 0 {
		h.max = DefaultMaxSize
	}
	if h.log == nil {
		h.log = hclog.NewNullLogger()
	}
	return h
}

type handler struct {
	archive *DirArchive
	token   string
	max     int64
	log     hclog.Logger
}

// httpError is what a request handler returns for a request it cannot
// serve: the status, the message the client may read, and the cause for the
// log.
type httpError struct {
	Status  int
	Message string
	Err     error
}

func (e *httpError) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *httpError) Unwrap() error { return e.Err }

// methodNotAllowed is the error for a method a path does not serve.
func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) error {
	w.Header().Set("Allow", allow)
	return &httpError{Status: http.StatusMethodNotAllowed, Message: fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	err := h.serve(w, r)
	if err == nil {
		return
	}
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{Status: http.StatusInternalServerError, Message: "internal error", Err: err}
	}
	if he.Status >= 500 {
		h.log.Error("bundle request failed", "method", r.Method, "path", r.URL.Path, "status", he.Status, "error", err)
	} else {
		h.log.Debug("bundle request refused", "method", r.Method, "path", r.URL.Path, "status", he.Status, "error", he.Message)
	}
	if he.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="stickyd bundles"`)
	}
	writeJSON(w, he.Status, map[string]string{"error": he.Message})
}

// serve routes a request by its path.
func (h *handler) serve(w http.ResponseWriter, r *http.Request) error {
	name := strings.TrimPrefix(r.URL.Path, "/")
	if name == "index.json" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return methodNotAllowed(w, r, "GET, HEAD")
		}
		entries, err := h.archive.List(r.Context())
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, index{Bundles: entries})
		return nil
	}
	if hx, ok := strings.CutSuffix(name, ".tar.gz.sha256"); ok && isArchiveHex(hx) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return methodNotAllowed(w, r, "GET, HEAD")
		}
		return h.serveChecksum(w, r, hx)
	}
	if hx, ok := strings.CutSuffix(name, ".tar.gz"); ok && isArchiveHex(hx) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			return h.serveBundle(w, r, hx)
		case http.MethodPut:
			return h.put(w, r, hx)
		default:
			return methodNotAllowed(w, r, "GET, HEAD, PUT")
		}
	}
	return &httpError{Status: http.StatusNotFound, Message: fmt.Sprintf("no such file %q: this archive serves /<64 hex>.tar.gz, /<64 hex>.tar.gz.sha256 and /index.json", r.URL.Path)}
}

// isArchiveHex reports whether s is the hex of a digest as archives name
// their files: 64 lowercase hex digits.
func isArchiveHex(s string) bool { return len(s) == 64 && isLowerHex(s) }

// serveBundle sends <hex>.tar.gz. Bundles never change, so they may be
// cached forever.
func (h *handler) serveBundle(w http.ResponseWriter, r *http.Request, hx string) error {
	f, err := os.Open(filepath.Join(h.archive.dir, hx+".tar.gz"))
	if errors.Is(err, os.ErrNotExist) {
		return &httpError{Status: http.StatusNotFound, Message: fmt.Sprintf("bundle sha256:%s not found", hx)}
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("ETag", `"sha256:`+hx+`"`)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	http.ServeContent(w, r, hx+".tar.gz", fi.ModTime(), f)
	return nil
}

// serveChecksum sends the sha256sum line of a held bundle. It states the
// name, which Put verified, so a file damaged on disk since then fails the
// client's check instead of passing it.
func (h *handler) serveChecksum(w http.ResponseWriter, r *http.Request, hx string) error {
	if _, err := os.Stat(filepath.Join(h.archive.dir, hx+".tar.gz")); errors.Is(err, os.ErrNotExist) {
		return &httpError{Status: http.StatusNotFound, Message: fmt.Sprintf("bundle sha256:%s not found", hx)}
	} else if err != nil {
		return err
	}
	body := hx + "  " + hx + ".tar.gz\n"
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(body))
	}
	return nil
}

// put checks the token and the size, then verifies and stores the upload.
func (h *handler) put(w http.ResponseWriter, r *http.Request, hx string) error {
	if h.token == "" {
		return &httpError{Status: http.StatusForbidden, Message: "uploads are disabled on this archive (it is served without a token)"}
	}
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return &httpError{Status: http.StatusUnauthorized, Message: "uploading needs a token: send Authorization: Bearer <token>"}
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), []byte(h.token)) != 1 {
		return &httpError{Status: http.StatusForbidden, Message: "wrong token"}
	}
	if r.ContentLength > h.max {
		return &httpError{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("bundle is %d bytes, over this archive's limit of %d", r.ContentLength, h.max)}
	}
	body := &uploadReader{r: http.MaxBytesReader(w, r.Body, h.max)}
	digest := DigestPrefix + hx
	created, m, err := h.archive.put(r.Context(), digest, body)
	var tooBig *http.MaxBytesError
	var upload *uploadError
	switch {
	case errors.As(err, &tooBig):
		return &httpError{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("bundle is over this archive's limit of %d bytes", h.max)}
	case errors.As(err, &upload):
		return &httpError{Status: http.StatusBadRequest, Message: "reading the upload: " + upload.err.Error(), Err: err}
	case errors.Is(err, ErrTampered), errors.Is(err, ErrInvalidManifest), errors.Is(err, ErrBadDigest):
		return &httpError{Status: http.StatusBadRequest, Message: err.Error()}
	case err != nil:
		return err
	}
	e := Entry{Digest: digest, Name: m.Name, Version: m.Version, Runtime: m.Runtime}
	if fi, err := os.Stat(filepath.Join(h.archive.dir, hx+".tar.gz")); err == nil {
		e.Size = fi.Size()
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		h.log.Info("bundle stored", "digest", digest, "name", m.Name, "version", m.Version, "size", e.Size)
	}
	writeJSON(w, status, e)
	return nil
}

// uploadReader marks the errors of reading a request's body, so that they
// are told apart from the server's own (writing the file).
type uploadReader struct{ r io.Reader }

func (u *uploadReader) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	if err != nil && err != io.EOF {
		err = &uploadError{err: err}
	}
	return n, err
}

// uploadError is a failure to read an upload: the client's doing.
type uploadError struct{ err error }

func (e *uploadError) Error() string { return "reading the upload: " + e.err.Error() }
func (e *uploadError) Unwrap() error { return e.err }

// writeJSON sends v as the JSON body of a response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // messages read "<hex>"; the type is JSON, not sniffed
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
