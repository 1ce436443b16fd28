package telemetry

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// The pipeline's goroutines (the batcher, the exporters' clients) end
// with Shutdown.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// collector is an OTLP/HTTP endpoint that keeps what it is sent.
type collector struct {
	mu    sync.Mutex
	posts []post
	srv   *httptest.Server
}

type post struct {
	path, contentType, key string
	body                   []byte
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.posts = append(c.posts, post{r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("X-Api-Key"), b})
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) got() []post {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]post(nil), c.posts...)
}

// The block's checks and defaults.
func TestFinish(t *testing.T) {
	c := &Config{}
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	if c.OTLPProtocol != ProtocolHTTP || *c.SampleRatio != 1 || c.ServiceName != "stickyd" {
		t.Fatalf("defaults: %+v", c)
	}
	two, neg := 2.0, -0.1
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{OTLPProtocol: "http/json"}, `otlp_protocol "http/json"`},
		{Config{SampleRatio: &two}, "sample_ratio 2"},
		{Config{SampleRatio: &neg}, "sample_ratio -0.1"},
		{Config{OTLPEndpoint: "ftp://collector:4318"}, "want host:port, or an http:// or https:// URL"},
	} {
		if err := tc.c.Finish(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
	if tr, err := New(context.Background(), nil, "a"); tr != nil || err != nil || tr.TracerProvider() != nil || tr.Shutdown(context.Background()) != nil {
		t.Fatalf("no block: %v %v", tr, err)
	}
}

// Spans go to the collector as OTLP/HTTP protobuf, at /v1/traces of a
// host:port or of a URL without a path, at a URL's own path otherwise,
// with the block's headers; Shutdown sends what is still held.
func TestExportsOverHTTP(t *testing.T) {
	c := newCollector(t)
	host := strings.TrimPrefix(c.srv.URL, "http://")
	for _, tc := range []struct{ endpoint, path string }{
		{host, "/v1/traces"},
		{c.srv.URL, "/v1/traces"},
		{c.srv.URL + "/otlp/v1/traces", "/otlp/v1/traces"},
	} {
		t.Run(tc.endpoint, func(t *testing.T) {
			before := len(c.got())
			tr, err := New(context.Background(), &Config{OTLPEndpoint: tc.endpoint, Headers: map[string]string{"X-Api-Key": "k"}}, "s1")
			if err != nil {
				t.Fatal(err)
			}
			_, span := tr.TracerProvider().Tracer("test").Start(context.Background(), "chat small")
			span.End()
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			posts := c.got()[before:]
			if len(posts) != 1 {
				t.Fatalf("%d posts", len(posts))
			}
			p := posts[0]
			if p.path != tc.path || p.contentType != "application/x-protobuf" || p.key != "k" ||
				!bytes.Contains(p.body, []byte("chat small")) || !bytes.Contains(p.body, []byte("stickyd")) || !bytes.Contains(p.body, []byte("s1")) {
				t.Fatalf("posted %s %s key %q: %q", p.path, p.contentType, p.key, p.body)
			}
		})
	}
}

// A gRPC exporter is built without dialling; a call not sampled is not
// exported.
func TestGRPCAndSampling(t *testing.T) {
	zero := 0.0
	tr, err := New(context.Background(), &Config{OTLPProtocol: ProtocolGRPC, OTLPEndpoint: "127.0.0.1:1", SampleRatio: &zero}, "s1")
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.TracerProvider().Tracer("test").Start(context.Background(), "chat small")
	if span.IsRecording() {
		t.Fatal("sample_ratio 0 recorded a span")
	}
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
