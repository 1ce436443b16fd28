package gemini

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

// Whatever Gemini streams back: the adapter never panics, and its stream
// ends with exactly one last chunk, Done or Err, the last one sent. The
// same body as a whole answer is an answer or an error.
func FuzzStream(f *testing.F) {
	for _, s := range []string{
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"hi\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":3}}\r\n\r\n",
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":{}}}]}}]}\n\n",
		"data: {\"error\":{\"code\":429,\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"retryDelay\":\"1s\"}]}}\n\n",
		": ping\n\ndata: {not json}\n\n", "data: {}", "",
		`{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"MAX_TOKENS"}],"promptFeedback":{"blockReason":"SAFETY"}}`,
	} {
		f.Add([]byte(s))
	}
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body.Load().([]byte))
	}))
	defer srv.Close()
	a, err := New(Config{BaseURL: srv.URL, APIKey: "k", StallTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	req := gateway.Request{Model: "m", Messages: []gateway.Message{{Role: "user", Content: "x"}}}
	f.Fuzz(func(t *testing.T, b []byte) {
		body.Store(b)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = a.Complete(ctx, req)
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
