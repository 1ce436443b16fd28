package front

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// framingServer serves, through the front's listener, a handler that
// records each request it sees (method, path, body).
func framingServer(t *testing.T) (addr string, seen func() []string, reg *prometheus.Registry) {
	t.Helper()
	reg = prometheus.NewRegistry()
	f, _, _ := testFront(t, Config{Registry: reg})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, fmt.Sprintf("%s %s %q", r.Method, r.URL.Path, body))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(f.Limit(raw, 0)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return raw.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}, reg
}

// answers sends raw on a new connection and reads every answer until the
// connection closes: their status codes.
func answers(t *testing.T, addr, raw string) []int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var codes []int
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the connection stayed open after %v", codes)
			}
			return codes
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.Close {
			return codes
		}
	}
}

// Requests framed as RFC 9112 asks are served, pipelined, with bodies of
// either kind; a request that breaks the framing rules is answered 400
// and ends its connection, the requests before it served, none after it,
// and nothing of it reaches the handler.
func TestStrictFraming(t *testing.T) {
	for _, tt := range []struct {
		name   string
		raw    string
		codes  []int
		seen   []string
		reason framingReason
	}{
		{"pipelined, CRLF", "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			[]int{200, 200}, []string{`GET /a ""`, `GET /b ""`}, ""},
		{"bodies of both kinds, bare LF inside them", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\na\nb\nc" +
			"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nd\ne\r\n0\r\nT: v\r\n\r\n" +
			"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			[]int{200, 200, 200}, []string{`POST /a "a\nb\nc"`, `POST /b "d\ne"`, `GET /c ""`}, ""},
		{"an empty line before a request (Go's own refusal)", "\r\nGET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []int{400}, nil, ""},
		{"bare LF request lines, pipelined", "GET /a HTTP/1.1\nHost: x\n\nGET /b HTTP/1.1\nHost: x\n\n",
			[]int{400}, nil, reasonBareLF},
		{"a bare LF in a field", "GET /a HTTP/1.1\r\nHost: x\nX-Y: z\r\n\r\n", []int{400}, nil, reasonBareLF},
		{"a bare LF after a good request", "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\nHost: x\r\n\r\n",
			[]int{200, 400}, []string{`GET /a ""`}, reasonBareLF},
		{"a bare CR", "GET /a HTTP/1.1\r\nHost: x\rX-Y: z\r\n\r\n", []int{400}, nil, reasonBareCR},
		{"Content-Length and Transfer-Encoding", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			[]int{400}, nil, reasonCLAndTE},
		{"another transfer coding", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
			[]int{400}, nil, reasonCoding},
		{"chunk data longer than its size", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
			[]int{400}, nil, reasonChunk},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, seen, reg := framingServer(t)
			codes := answers(t, addr, tt.raw)
			if fmt.Sprint(codes) != fmt.Sprint(tt.codes) {
				t.Fatalf("answers %v, want %v", codes, tt.codes)
			}
			if got := seen(); strings.Join(got, "|") != strings.Join(tt.seen, "|") {
				t.Fatalf("the handler saw %q, want %q", got, tt.seen)
			}
			if tt.reason != "" {
				if n := counted(t, reg, string(tt.reason)); n != 1 {
					t.Fatalf("refusals counted for %s: %v", tt.reason, n)
				}
			}
		})
	}
}

func counted(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "stickyd_front_framing_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// The scanner never panics and never reads past a break, whatever the
// bytes, however they are split.
func FuzzFraming(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 3)
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), 7)
	f.Add([]byte("GET / HTTP/1.1\nHost: x\n\n"), 1)
	f.Fuzz(func(t *testing.T, b []byte, split int) {
		whole := newFraming()
		wi, wr := whole.scan(b)
		if split <= 0 || split > len(b) {
			split = len(b) / 2
		}
		parts := newFraming()
		pi, pr := parts.scan(b[:split])
		if pi < 0 {
			if pi, pr = parts.scan(b[split:]); pi >= 0 {
				pi += split
			}
		}
		if wi != pi || wr != pr {
			t.Fatalf("whole: %d %s; split at %d: %d %s", wi, wr, split, pi, pr)
		}
	})
}
