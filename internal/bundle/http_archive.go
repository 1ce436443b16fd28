package bundle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// HTTPArchive is an archive served over HTTP, by Handler or any server with
// the same layout:
//
//	GET <base>/<hex>.tar.gz   the bundle
//	PUT <base>/<hex>.tar.gz   store a bundle (Authorization: Bearer <token>)
//	GET <base>/index.json     {"bundles": [Entry, ...]}
type HTTPArchive struct {
	base     *url.URL
	token    string
	readOnly bool
	client   *http.Client
}

var _ Archive = (*HTTPArchive)(nil)

// maxIndexSize bounds index.json; maxErrorBody bounds the part of an error
// response quoted in an error.
const (
	maxIndexSize = 64 << 20
	maxErrorBody = 4 << 10
)

// NewHTTPArchive opens the archive served at base, an http:// or https://
// URL; nothing is requested until a method is called.
func NewHTTPArchive(base string, opts ArchiveOptions) (*HTTPArchive, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("opening archive %q: %w", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("opening archive %q: want an http:// or https:// URL", base)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("opening archive %q: no host", base)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("opening archive %q: the URL must not have a query or fragment", base)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	client := opts.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	return &HTTPArchive{base: u, token: opts.Token, readOnly: opts.ReadOnly, client: client}, nil
}

// String returns the archive's base URL, for messages.
func (a *HTTPArchive) String() string { return a.base.String() }

// URL returns the URL of a file of the archive ("<hex>.tar.gz", "index.json").
func (a *HTTPArchive) URL(name string) string {
	u := *a.base
	u.Path += "/" + name
	return u.String()
}

// Put verifies the bundle locally (spooling it to a temporary file), then
// uploads it with PUT. The server verifies it again before storing it. A
// refused token gives ErrDenied, an upload over the server's limit
// ErrTooLarge, a bundle the server finds bad ErrTampered.
func (a *HTTPArchive) Put(ctx context.Context, digest string, r io.Reader) error {
	if a.readOnly {
		return fmt.Errorf("putting bundle into %s: %w", a, ErrReadOnly)
	}
	h, err := hexOf(digest)
	if err != nil {
		return err
	}
	spool, err := os.CreateTemp("", "stickyd-bundle-*.tar.gz")
	if err != nil {
		return fmt.Errorf("putting bundle into %s: %w", a, err)
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	if _, _, err := verify(io.TeeReader(ctxReader{ctx, r}, spool), digest, nil); err != nil {
		return err
	}
	size, err := spool.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("putting bundle into %s: %w", a, err)
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("putting bundle into %s: %w", a, err)
	}
	req, err := a.request(ctx, http.MethodPut, h+".tar.gz", io.NopCloser(spool))
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("putting bundle sha256:%s into %s: %w", h, a, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusCreated, http.StatusNoContent:
		return nil
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("putting bundle sha256:%s into %s: %w: %s", h, a, ErrDenied, errorMessage(resp))
	case http.StatusRequestEntityTooLarge:
		return fmt.Errorf("putting bundle sha256:%s into %s: %w: %s", h, a, ErrTooLarge, errorMessage(resp))
	case http.StatusBadRequest:
		return fmt.Errorf("putting bundle sha256:%s into %s: %w: %s", h, a, ErrTampered, errorMessage(resp))
	default:
		return fmt.Errorf("putting bundle sha256:%s into %s: %s", h, a, errorMessage(resp))
	}
}

// Open fetches <base>/<hex>.tar.gz; the body is returned as it streams.
func (a *HTTPArchive) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	h, err := hexOf(digest)
	if err != nil {
		return nil, err
	}
	req, err := a.request(ctx, http.MethodGet, h+".tar.gz", nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching bundle sha256:%s from %s: %w", h, a, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.Body, nil
	case http.StatusNotFound:
		resp.Body.Close()
		return nil, fmt.Errorf("%w: sha256:%s in archive %s", ErrNotFound, h, a)
	default:
		defer resp.Body.Close()
		return nil, fmt.Errorf("fetching bundle sha256:%s from %s: %s", h, a, errorMessage(resp))
	}
}

// List fetches <base>/index.json.
func (a *HTTPArchive) List(ctx context.Context) ([]Entry, error) {
	req, err := a.request(ctx, http.MethodGet, "index.json", nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("listing archive %s: %w", a, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("listing archive %s: %s", a, errorMessage(resp))
	}
	var idx index
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxIndexSize))
	if err := dec.Decode(&idx); err != nil {
		return nil, fmt.Errorf("listing archive %s: decoding index.json: %w", a, err)
	}
	if idx.Bundles == nil {
		idx.Bundles = []Entry{}
	}
	sortEntries(idx.Bundles)
	return idx.Bundles, nil
}

// index is the body of index.json.
type index struct {
	Bundles []Entry `json:"bundles"`
}

// request builds a request for a file of the archive, with the token.
func (a *HTTPArchive) request(ctx context.Context, method, name string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.URL(name), body)
	if err != nil {
		return nil, fmt.Errorf("requesting %s from %s: %w", name, a, err)
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	return req, nil
}

// errorMessage describes a failed response: its status and the server's
// message ({"error": "..."} as Handler writes it, or the start of the body).
func errorMessage(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var e struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if msg == "" {
		return resp.Status
	}
	return resp.Status + ": " + msg
}
