package command

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/cli"
)

const testToken = "s3cret-token"

// call is one request the fake API saw.
type call struct {
	Method, Path, RawPath, Query, Token string
	Body                                []byte
}

// fakeAPI is an httptest server behind the admin API's token check
// (missing → 401, wrong → 403, both with {"error": ...}) that records
// every request and serves routes, ServeMux patterns as in package api.
type fakeAPI struct {
	URL string

	mu    sync.Mutex // guards calls
	calls []call
}

func newFakeAPI(t *testing.T, routes map[string]http.HandlerFunc) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.HandleFunc(pattern, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no API route "+r.Method+" "+r.URL.Path)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		tok := r.Header.Get("X-Stickyd-Token")
		if tok == "" {
			tok, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		f.mu.Lock()
		f.calls = append(f.calls, call{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(),
			Query: r.URL.RawQuery, Token: tok, Body: body})
		f.mu.Unlock()
		switch tok {
		case "":
			writeError(w, http.StatusUnauthorized, "missing admin token: set STICKYD_TOKEN or pass -token")
		case testToken:
			mux.ServeHTTP(w, r)
		default:
			writeError(w, http.StatusForbidden, "wrong admin token")
		}
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// Calls returns the requests seen so far.
func (f *fakeAPI) Calls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// only returns the one request seen, failing the test otherwise.
func (f *fakeAPI) only(t *testing.T) call {
	t.Helper()
	calls := f.Calls()
	if len(calls) != 1 {
		t.Fatalf("the API saw %d calls, want 1: %+v", len(calls), calls)
	}
	if calls[0].Token != testToken {
		t.Fatalf("token %q, want %q", calls[0].Token, testToken)
	}
	return calls[0]
}

// args appends the flags that point a command at the fake.
func (f *fakeAPI) args(args ...string) []string {
	return append(args, "-address", f.URL, "-token", testToken)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// answer is a handler that always answers status and v.
func answer(status int, v any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { writeJSON(w, status, v) }
}

// result is what a command did.
type result struct {
	code           int
	stdout, stderr string
}

// run runs the command line with a MockUi, with $STICKYD_ADDR and
// $STICKYD_TOKEN cleared so the caller's environment cannot leak in.
func run(t *testing.T, args ...string) result {
	t.Helper()
	t.Setenv("STICKYD_ADDR", "")
	t.Setenv("STICKYD_TOKEN", "")
	ui := cli.NewMockUi()
	code := RunWith(args, ui, nil)
	return result{code, ui.OutputWriter.String(), ui.ErrorWriter.String()}
}

// expect checks the exit code and that stdout and stderr contain the
// given pieces.
func (r result) expect(t *testing.T, code int, stdout, stderr []string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
		}
	}
	for _, s := range stderr {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
}

// deadAddress is an address where nothing listens: a port the OS gave
// and took back.
func deadAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func newUI() *cli.MockUi { return cli.NewMockUi() }
