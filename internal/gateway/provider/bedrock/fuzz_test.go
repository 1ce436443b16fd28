package bedrock

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/provider/bedrock/bedrocktest"
)

// Whatever bytes an event stream brings: the adapter never panics, and
// its stream ends with exactly one last chunk, Done or Err, the last one
// sent.
func FuzzStream(f *testing.F) {
	var seed bytes.Buffer
	for _, e := range append(append([]ev{}, textEvents...), stopEvents...) {
		bedrocktest.WriteEvent(&seed, e[0].(string), e[1])
	}
	f.Add(seed.Bytes())
	var tools bytes.Buffer
	for _, e := range toolEvents {
		bedrocktest.WriteEvent(&tools, e[0].(string), e[1])
	}
	f.Add(tools.Bytes())
	var exc bytes.Buffer
	bedrocktest.WriteEvent(&exc, "messageStart", map[string]string{"role": "assistant"})
	bedrocktest.WriteException(&exc, "throttlingException", "slow down")
	f.Add(exc.Bytes())
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00\x10\x00\x00\x00\x00garbage"))

	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", bedrocktest.EventStreamType)
		_, _ = w.Write(body.Load().([]byte))
	}))
	defer srv.Close()
	dir := f.TempDir()
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": accessKey, "AWS_SECRET_ACCESS_KEY": secretKey, "AWS_CA_BUNDLE": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": filepath.Join(dir, "c"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "s"), "AWS_EC2_METADATA_DISABLED": "true"} {
		f.Setenv(k, v)
	}
	a, err := New(Config{Region: region, Endpoint: srv.URL, HTTPClient: srv.Client(), StallTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	req := gateway.Request{Model: "m", Messages: []gateway.Message{{Role: "user", Content: "x"}}}
	f.Fuzz(func(t *testing.T, b []byte) {
		body.Store(b)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ch, err := a.Stream(ctx, req)
		if err != nil {
			return
		}
		var last gateway.Chunk
		n := 0
		for c := range ch {
			if last.Done || last.Err != nil {
				t.Fatalf("a chunk after the last one: %+v", c)
			}
			last = c
			n++
		}
		if n == 0 || (!last.Done && last.Err == nil) {
			t.Fatalf("the stream ended without a last chunk (%d chunks, last %+v)", n, last)
		}
	})
}
