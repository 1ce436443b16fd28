package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync/atomic"
	"time"
)

// The fake provider every system under test calls: an OpenAI-compatible
// /v1/chat/completions that answers at once (or after a fixed latency), a
// whole answer or, for "stream": true, an SSE stream of three chunks, the
// usage chunk when stream_options.include_usage asks for it, and
// [DONE]. GET /calls answers how many calls it has served (a check that a
// gateway reached it).

// providerModel is the model the provider answers as.
const providerModel = "small-v1"

var (
	wholeAnswer  = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"small-v1","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	streamChunks = []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"small-v1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"small-v1","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"small-v1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}

`)
	streamUsage = []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"small-v1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}

`)
	streamDone = []byte("data: [DONE]\n\n")
)

// startProvider serves the fake provider on a free loopback port; each
// answer waits latency first (0: none).
func startProvider(latency time.Duration) (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var calls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		calls.Add(1)
		if latency > 0 {
			time.Sleep(latency)
		}
		// A look for the two members that matter, not a decode: the
		// provider must cost as little as it can (it shares the CPUs).
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(wholeAnswer)
			return
		}
		var req struct {
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if bytes.Contains(body, []byte(`"include_usage"`)) {
			_ = json.Unmarshal(body, &req)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		out := append([]byte(nil), streamChunks...)
		if req.StreamOptions.IncludeUsage {
			out = append(out, streamUsage...)
		}
		out = append(out, streamDone...)
		_, _ = w.Write(out)
	})
	mux.HandleFunc("GET /calls", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, calls.Load())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			fmt.Fprintln(os.Stderr, "provider:", err)
		}
	}()
	return ln, nil
}

// startProxy serves Go's reverse proxy to upstream on a free loopback
// port, flushing each write of a stream as it comes (what an SSE-aware
// proxy must do).
func startProxy(upstream string) (net.Listener, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("upstream %q: not a URL", upstream)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			fmt.Fprintln(os.Stderr, "proxy:", err)
		}
	}()
	return ln, nil
}
