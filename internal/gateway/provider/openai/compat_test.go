package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/gateway"
)

// vllmChunks is a vLLM stream with stream_options.continuous_usage_stats:
// the usage, cumulative, on every chunk, then the usage chunk.
var vllmChunks = []string{
	`{"id":"chatcmpl-v","object":"chat.completion.chunk","created":1,"model":"qwen","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":12,"completion_tokens":0}}`,
	`{"id":"chatcmpl-v","object":"chat.completion.chunk","created":1,"model":"qwen","choices":[{"index":0,"delta":{"content":"Sticky"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":13,"completion_tokens":1}}`,
	`{"id":"chatcmpl-v","object":"chat.completion.chunk","created":1,"model":"qwen","choices":[{"index":0,"delta":{"content":" sessions"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":14,"completion_tokens":2}}`,
	`{"id":"chatcmpl-v","object":"chat.completion.chunk","created":1,"model":"qwen","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":14,"completion_tokens":2}}`,
	`{"id":"chatcmpl-v","object":"chat.completion.chunk","created":1,"model":"qwen","choices":[],"usage":{"prompt_tokens":12,"total_tokens":14,"completion_tokens":2}}`,
}

// The compat quirks: extra headers, the key in another header, the
// continuous usage asked for (and charged when the stream is cut), and
// stream_options never sent to a server that refuses it.
func TestCompatQuirks(t *testing.T) {
	cut := false
	ts := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, c := range vllmChunks {
			if cut && i == 3 {
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			}
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	reset := func() {
		ts.mu.Lock()
		ts.reqs = nil
		ts.mu.Unlock()
	}
	plain := gateway.Request{Model: "qwen", Messages: []gateway.Message{{Role: "user", Content: "hi"}}}
	nativeReq := func(body string) gateway.Request {
		return gateway.Request{Model: "qwen", Native: &gateway.Native{Shape: gateway.ShapeOpenAIChat, Body: []byte(body)}}
	}

	t.Run("headers and key", func(t *testing.T) {
		reset()
		a := newAdapter(t, ts, func(c *Config) {
			c.Organization = ""
			c.AuthHeader = "X-Api-Key"
			c.Headers = map[string]string{"X-Title": "stickyd", "HTTP-Referer": "https://stickyd.example"}
		})
		collect(t, mustStream(t, a, plain))
		h := ts.only(t).header
		if h.Get("Authorization") != "" || h.Get("X-Api-Key") != testKey || h.Get("X-Title") != "stickyd" || h.Get("Http-Referer") != "https://stickyd.example" {
			t.Fatalf("headers %v", h)
		}
	})

	t.Run("continuous usage", func(t *testing.T) {
		a := newAdapter(t, ts, func(c *Config) { c.ContinuousUsage = true })
		for _, tc := range []struct{ name, body, sent string }{
			{"built", "", `"stream_options":{"include_usage":true,"continuous_usage_stats":true}`},
			{"native", `{"model":"m","stream":true,"messages":[]}`,
				`{"model":"qwen","stream":true,"messages":[],"stream_options":{"continuous_usage_stats":true,"include_usage":true}}`},
			{"native asked", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
				`{"model":"qwen","stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":true},"messages":[]}`},
		} {
			reset()
			req := plain
			if tc.body != "" {
				req = nativeReq(tc.body)
			}
			chunks := collect(t, mustStream(t, a, req))
			if sent := string(ts.only(t).body); !strings.Contains(sent, tc.sent) {
				t.Errorf("%s: sent %s, want %s", tc.name, sent, tc.sent)
			}
			last := chunks[len(chunks)-1]
			if !last.Done || *last.Usage != (gateway.Usage{Input: 12, Output: 2}) {
				t.Errorf("%s: last chunk %+v", tc.name, last)
			}
		}
		// A stream cut midway is charged the usage reported so far.
		cut = true
		defer func() { cut = false }()
		chunks := collect(t, mustStream(t, a, plain))
		last := chunks[len(chunks)-1]
		if last.Err == nil || last.Usage == nil || *last.Usage != (gateway.Usage{Input: 12, Output: 2}) {
			t.Fatalf("cut stream's last chunk %+v (usage %v)", last, last.Usage)
		}
		if gateway.KindOf(last.Err) != gateway.KindServer {
			t.Fatalf("cut stream's error %v", last.Err)
		}
	})

	t.Run("no stream_options", func(t *testing.T) {
		a := newAdapter(t, ts, func(c *Config) { c.NoStreamOptions = true })
		for _, body := range []string{"", `{"stream_options":{"include_usage":true},"model":"m","stream":true,"messages":[]}`,
			`{"model":"m","stream":true,"stream_options":null,"messages":[]}`, `{"model":"m","stream":true,"messages":[],"stream_options":{}}`} {
			reset()
			req := plain
			if body != "" {
				req = nativeReq(body)
			}
			collect(t, mustStream(t, a, req))
			sent := ts.only(t).body
			var v map[string]json.RawMessage
			if err := json.Unmarshal(sent, &v); err != nil {
				t.Fatalf("sent %s: %v", sent, err)
			}
			if _, ok := v["stream_options"]; ok || string(v["stream"]) != "true" {
				t.Errorf("sent %s", sent)
			}
		}
	})
}

func mustStream(t *testing.T, a *Adapter, req gateway.Request) <-chan gateway.Chunk {
	t.Helper()
	ch, err := a.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// Endpoint makes the URL of each call from its path and model.
func TestEndpoint(t *testing.T) {
	ts := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","model":"m","choices":[{"index":0,"message":{"content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	})
	a := newAdapter(t, ts, func(c *Config) {
		c.Endpoint = func(path, model string) string { return ts.URL + "/deployments/" + model + path + "?v=1" }
	})
	if _, err := a.Complete(context.Background(), testRequest(5)); err != nil {
		t.Fatal(err)
	}
	if got := ts.only(t); got.path != "/deployments/gpt-4o-mini/chat/completions" {
		t.Fatalf("path %s", got.path)
	}
}

func TestDeleteJSONField(t *testing.T) {
	for _, tc := range []struct{ in, out string }{
		{`{"a":1,"k":{"x":[1]},"b":2}`, `{"a":1,"b":2}`},
		{`{"k":1, "b":2}`, `{"b":2}`},
		{`{ "k" : 1 }`, `{  }`},
		{`{"a":1,"k":1}`, `{"a":1}`},
		{`{"a":1}`, `{"a":1}`},
	} {
		got, err := deleteJSONField([]byte(tc.in), "k")
		if err != nil || string(got) != tc.out {
			t.Errorf("%s: got %s (%v), want %s", tc.in, got, err, tc.out)
		}
	}
}
