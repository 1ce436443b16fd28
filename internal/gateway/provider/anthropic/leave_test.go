package anthropic

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

// A caller who leaves an Anthropic stream is charged the usage the
// provider reported (message_start's input, the output so far), never the
// four-bytes-a-token estimate, however early it leaves.
func TestLeftStreamChargedAsReported(t *testing.T) {
	const start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":1200,\"cache_read_input_tokens\":100,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello there, a long answer begins\"}}\n\n"
	a, _ := rawFake(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, start)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	for range 5 {
		ledger := gateway.NewMemLedger()
		r, err := gateway.New(gateway.Config{Ledger: ledger, Models: []gateway.Model{{Name: "m", Concurrency: 1,
			Deployments: []gateway.Deployment{{Name: "d", Provider: "anthropic", Upstream: "claude", Adapter: a, Price: gateway.Price{Input: 3, CachedInput: 0.3, Output: 15}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		ch, err := r.Stream(ctx, gateway.Call{Session: "s", Request: gateway.Request{Model: "m", Messages: []gateway.Message{{Role: "user", Content: "a long prompt of many bytes"}}}})
		if err != nil {
			t.Fatal(err)
		}
		for c := range ch {
			if c.Delta != "" {
				break // the caller leaves at the first text
			}
		}
		cancel()
		for range ch {
		}
		deadline := time.Now().Add(5 * time.Second)
		for ledger.Counters().Total.Calls == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		got := ledger.Counters().Total
		if want := (gateway.Usage{Input: 1200, CachedInput: 100, Output: 1}); got.Usage != want || got.Micros != 3600+30+15 {
			t.Fatalf("charged %+v, want the reported %+v", got, want)
		}
		r.Close()
	}
}
