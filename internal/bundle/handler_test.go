package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

const testToken = "s3cret-token"

// newServer serves a fresh directory archive with Handler.
func newServer(t *testing.T, opts HandlerOptions) (srv *httptest.Server, dir string) {
	t.Helper()
	dir = t.TempDir()
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "bundle", Output: tWriter{t}, Level: hclog.Debug})
	}
	srv = httptest.NewServer(Handler(dir, opts))
	t.Cleanup(srv.Close)
	return srv, dir
}

// tWriter sends log lines to the test's log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// do sends one request and returns the status and body.
func do(t *testing.T, method, url, token string, body []byte) (int, string, http.Header) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestHandlerPut uploads with raw HTTP requests: 401 without a token, 403
// with a wrong one, 400 for a tampered upload, 413 over the limit, 201 for
// a good one, 200 when repeated; only the good one is stored.
func TestHandlerPut(t *testing.T) {
	archive, digest := packApp(t)
	h := digest[len(DigestPrefix):]
	srv, dir := newServer(t, HandlerOptions{Token: testToken, MaxSize: int64(len(archive)) + 10})
	url := srv.URL + "/" + h + ".tar.gz"
	bad := bytes.Clone(archive)
	bad[len(bad)/2] ^= 0x10

	tests := []struct {
		name   string
		token  string
		body   []byte
		status int
		says   string
	}{
		{"no token", "", archive, http.StatusUnauthorized, "uploading needs a token"},
		{"wrong token", "guess", archive, http.StatusForbidden, "wrong token"},
		{"tampered upload", testToken, bad, http.StatusBadRequest, "bundle " + digest + ": the archive hashes to " + digestOf(bad)},
		{"too large", testToken, append(bytes.Clone(archive), make([]byte, 64)...), http.StatusRequestEntityTooLarge, "over this archive's limit"},
		{"good", testToken, archive, http.StatusCreated, `"name": "demo"`},
		{"again", testToken, archive, http.StatusOK, `"digest": "` + digest + `"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body, hdr := do(t, http.MethodPut, url, tc.token, tc.body)
			if status != tc.status || !strings.Contains(body, tc.says) {
				t.Fatalf("PUT: %d %s, want %d saying %q", status, body, tc.status, tc.says)
			}
			if status == http.StatusUnauthorized && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("401 without WWW-Authenticate: Bearer")
			}
			if status >= 400 {
				var e struct{ Error string }
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
					t.Fatalf("error body is not {\"error\": ...}: %s", body)
				}
			}
		})
	}
	// Over the limit without a Content-Length (chunked): cut off while read.
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/"+strings.Repeat("a", 64)+".tar.gz", io.MultiReader(bytes.NewReader(archive), bytes.NewReader(make([]byte, 64))))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked upload over the limit: %d", resp.StatusCode)
	}
	if names := dirNames(t, dir); len(names) != 1 || names[0] != h+".tar.gz" {
		t.Fatalf("archive holds %v, want only the good bundle", names)
	}

	// A server without a token takes no uploads.
	ro, _ := newServer(t, HandlerOptions{})
	if status, body, _ := do(t, http.MethodPut, ro.URL+"/"+h+".tar.gz", testToken, archive); status != http.StatusForbidden || !strings.Contains(body, "uploads are disabled") {
		t.Fatalf("PUT to a server without a token: %d %s", status, body)
	}
}

// TestHandlerGet fetches what go-getter and other agents fetch: the bundle,
// its checksum file, the index; and gets clear 404s and 405s.
func TestHandlerGet(t *testing.T) {
	archive, digest := packApp(t)
	h := digest[len(DigestPrefix):]
	srv, dir := newServer(t, HandlerOptions{Token: testToken})
	if err := os.WriteFile(filepath.Join(dir, h+".tar.gz"), archive, 0o444); err != nil {
		t.Fatal(err)
	}

	status, body, hdr := do(t, http.MethodGet, srv.URL+"/"+h+".tar.gz", "", nil)
	if status != http.StatusOK || body != string(archive) || hdr.Get("Content-Type") != "application/gzip" {
		t.Fatalf("GET bundle: %d, %d bytes, %s", status, len(body), hdr.Get("Content-Type"))
	}
	if status, body, _ := do(t, http.MethodHead, srv.URL+"/"+h+".tar.gz", "", nil); status != http.StatusOK || body != "" {
		t.Fatalf("HEAD bundle: %d %q", status, body)
	}
	if status, body, _ := do(t, http.MethodGet, srv.URL+"/"+h+".tar.gz.sha256", "", nil); status != http.StatusOK || body != h+"  "+h+".tar.gz\n" {
		t.Fatalf("GET checksum: %d %q", status, body)
	}
	status, body, _ = do(t, http.MethodGet, srv.URL+"/index.json", "", nil)
	var idx struct{ Bundles []Entry }
	if err := json.Unmarshal([]byte(body), &idx); status != http.StatusOK || err != nil || len(idx.Bundles) != 1 || idx.Bundles[0].Name != "demo" || idx.Bundles[0].Digest != digest {
		t.Fatalf("GET index.json: %d %s", status, body)
	}

	absent := strings.Repeat("0", 64)
	for _, tc := range []struct {
		method, path string
		status       int
		says         string
	}{
		{http.MethodGet, "/" + absent + ".tar.gz", http.StatusNotFound, "bundle sha256:" + absent + " not found"},
		{http.MethodGet, "/" + absent + ".tar.gz.sha256", http.StatusNotFound, "not found"},
		{http.MethodGet, "/" + strings.ToUpper(h) + ".tar.gz", http.StatusNotFound, "serves /<64 hex>.tar.gz"},
		{http.MethodGet, "/../../etc/passwd", http.StatusNotFound, "no such file"},
		{http.MethodGet, "/", http.StatusNotFound, "no such file"},
		{http.MethodDelete, "/" + h + ".tar.gz", http.StatusMethodNotAllowed, "allowed: GET, HEAD, PUT"},
		{http.MethodPost, "/index.json", http.StatusMethodNotAllowed, "allowed: GET, HEAD"},
	} {
		status, body, _ := do(t, tc.method, srv.URL+tc.path, "", nil)
		if status != tc.status || !strings.Contains(body, tc.says) {
			t.Errorf("%s %s: %d %s, want %d saying %q", tc.method, tc.path, status, body, tc.status, tc.says)
		}
	}
}

// TestHTTPArchive uses the HTTP archive client against Handler: Put with
// the token, ErrDenied without or with a wrong one, ErrReadOnly when opened
// read-only; Open and List; and a Cache fetching through it.
func TestHTTPArchive(t *testing.T) {
	ctx := context.Background()
	archive, digest := packApp(t)
	srv, dir := newServer(t, HandlerOptions{Token: testToken})

	for name, tc := range map[string]struct {
		opts ArchiveOptions
		kind error
	}{
		"no token":    {ArchiveOptions{}, ErrDenied},
		"wrong token": {ArchiveOptions{Token: "guess"}, ErrDenied},
		"read-only":   {ArchiveOptions{Token: testToken, ReadOnly: true}, ErrReadOnly},
	} {
		a, err := OpenArchive(srv.URL, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Put(ctx, digest, bytes.NewReader(archive)); !errors.Is(err, tc.kind) {
			t.Fatalf("%s: Put: %v, want %v", name, err, tc.kind)
		}
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("refused uploads left %v", names)
	}

	a, err := OpenArchive(srv.URL+"/", ArchiveOptions{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(archive)
	bad[40] ^= 1
	if err := a.Put(ctx, digest, bytes.NewReader(bad)); !errors.Is(err, ErrTampered) {
		t.Fatalf("tampered Put: %v", err)
	}
	if err := a.Put(ctx, digest, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, digest[len(DigestPrefix):]+".tar.gz")); err != nil {
		t.Fatalf("Put over HTTP did not store the bundle: %v", err)
	}

	rc, err := a.Open(ctx, digest)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := Verify(rc, digest); err != nil || m.Name != "demo" {
		t.Fatalf("Verify of the fetched bundle: %v", err)
	}
	rc.Close()
	if _, err := a.Open(ctx, digestOf([]byte("absent"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open of an absent bundle: %v", err)
	}
	entries, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0] != (Entry{Digest: digest, Size: int64(len(archive)), Name: "demo", Version: "1.4.2", Runtime: RuntimeGoPlugin}) {
		t.Fatalf("List = %+v", entries)
	}

	// An agent: a read-only HTTP archive and a cache.
	agentArchive, err := OpenArchive(srv.URL, ArchiveOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cache{Dir: t.TempDir(), Archive: agentArchive}
	o, err := c.Open(ctx, digest)
	if err != nil {
		t.Fatal(err)
	}
	if got := runEntry(t, o); got != wantOutput {
		t.Fatalf("entry printed %q", got)
	}
	// With the server gone, the cached copy still opens.
	srv.Close()
	if _, err := c.Open(ctx, digest); err != nil {
		t.Fatalf("Open from the cache with the archive down: %v", err)
	}
}
