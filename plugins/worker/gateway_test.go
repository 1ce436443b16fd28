package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// gwApp asks the gateway from a message: {"model": M, "stream": bool}. A
// stream's text grows at "answer" in the page tree.
type gwApp struct{ testApp }

func (gwApp) Message(ctx context.Context, p *Page, raw json.RawMessage) (any, error) {
	var m struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	req := GatewayRequest{Model: m.Model, Messages: []GatewayMessage{{Role: "user", Content: "hi"}}}
	if !m.Stream {
		resp, err := p.Gateway().Complete(ctx, req)
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
	ch, err := p.Gateway().Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	text := ""
	var last GatewayChunk
	for c := range ch {
		if c.Err != nil {
			return nil, c.Err
		}
		text += c.Delta
		if err := p.Tree().Set("answer", text); err != nil {
			return nil, err
		}
		last = c
	}
	return map[string]any{"text": text, "done": last.Done, "output": last.Usage.Output}, nil
}

// fakeGateway answers the worker's gateway calls as the agent does: model
// "small" answers "hello world" (streamed in two pieces), "midway" fails
// after one piece, anything else is an unknown model.
func fakeGateway(t *testing.T, peer **channel.Peer, sessions chan<- string) channel.Handler {
	return func(env *protocol.Envelope) {
		gc := env.GetGatewayCall()
		if gc == nil {
			return
		}
		p := *peer
		go func() {
			var call gatewayCall
			if err := json.Unmarshal(gc.Call, &call); err != nil || call.IdempotencyKey == "" {
				t.Errorf("call %s: %v", gc.Call, err)
			}
			sessions <- gc.Session
			refuse := func(code protocol.Error_Code, kind, msg string) {
				_ = p.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Error{Error: &protocol.Error{Code: code, Kind: kind, Message: msg}}})
			}
			chunk := func(c GatewayChunk, errText, kind string) {
				b, _ := json.Marshal(c)
				_ = p.Notify(&protocol.Envelope{Body: &protocol.Envelope_GatewayChunk{GatewayChunk: &protocol.GatewayChunk{
					CallId: env.Id, Chunk: b, Last: c.Done || errText != "", Error: errText, ErrorKind: kind}}})
			}
			switch {
			case call.Request.Model != "small" && call.Request.Model != "midway":
				refuse(protocol.Error_BAD_REQUEST, "unknown_model", `unknown model "`+call.Request.Model+`"`)
			case !gc.Stream:
				b, _ := json.Marshal(GatewayResponse{Content: "hello world", FinishReason: "stop", CostMicros: 55,
					Usage: GatewayUsage{Input: 12, CachedInput: 30, Output: 7}, Provider: "openai", Deployment: "local"})
				_ = p.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_GatewayReply{GatewayReply: &protocol.GatewayReply{Response: b}}})
			case call.Request.Model == "midway":
				chunk(GatewayChunk{Delta: "hel"}, "", "")
				chunk(GatewayChunk{}, "the provider did not answer: server", "server")
				refuse(protocol.Error_UNAVAILABLE, "server", "the provider did not answer: server")
			default:
				chunk(GatewayChunk{Delta: "hello"}, "", "")
				chunk(GatewayChunk{Delta: " world"}, "", "")
				chunk(GatewayChunk{Done: true, FinishReason: "stop", Usage: GatewayUsage{Output: 7}}, "", "")
				_ = p.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_GatewayReply{GatewayReply: &protocol.GatewayReply{}}})
			}
		}()
	}
}

// The SDK's gateway calls over a real channel: the person's user key is the
// session, a whole answer and a stream arrive, refusals keep their kind.
func TestGatewayCalls(t *testing.T) {
	h, w := channel.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ServeConn(ctx, gwApp{}, Options{Name: "test"}, w)
	}()
	if _, err := channel.Accept(t.Context(), h, &protocol.HelloAck{WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	sessions := make(chan string, 16)
	var peer *channel.Peer
	peer = channel.NewIdlePeer(h, fakeGateway(t, &peer, sessions))
	peer.Listen()
	hs := &host{t: t, peer: peer, done: done}
	t.Cleanup(func() {
		cancel()
		peer.Close()
		<-done
	})
	conn := hs.get("", "", "/").Identity.Conn
	if r := hs.get("~"+conn, conn, "/login?u=maria"); r.Identity.User != "maria" {
		t.Fatalf("login: %+v", r.Identity)
	}
	if _, err := hs.frame(&protocol.Frame{User: "maria", Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: "p", Kind: "k"}}}); err != nil {
		t.Fatal(err)
	}
	msg := func(data string) *protocol.MessageResult {
		t.Helper()
		r, err := hs.frame(&protocol.Frame{User: "maria", Conn: conn, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p", Data: []byte(data)}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetMessage()
	}
	tests := []struct {
		name, data, want, wantErr string
	}{
		{"complete", `{"model":"small"}`, `"content":"hello world"`, ""},
		{"stream", `{"model":"small","stream":true}`, `{"done":true,"output":7,"text":"hello world"}`, ""},
		{"unknown model", `{"model":"big"}`, "", `gateway (unknown_model): unknown model "big"`},
		{"unknown model streamed", `{"model":"big","stream":true}`, "", `gateway (unknown_model)`},
		{"failed midway", `{"model":"midway","stream":true}`, "", `gateway (server): the provider did not answer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := msg(tt.data)
			if tt.wantErr != "" {
				if !strings.Contains(r.Error, tt.wantErr) {
					t.Fatalf("error %q, want %q", r.Error, tt.wantErr)
				}
			} else if r.Error != "" || !strings.Contains(string(r.Data), tt.want) {
				t.Fatalf("answer %s (error %q), want %s", r.Data, r.Error, tt.want)
			}
			select {
			case s := <-sessions:
				if s != "maria" {
					t.Fatalf("charged to %q, want maria", s)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the host saw no call")
			}
		})
	}
}

// A detached page (an app's unit test) has no host to call.
func TestGatewayDetached(t *testing.T) {
	_, err := NewTestPage("k").Gateway().Complete(t.Context(), GatewayRequest{Model: "small"})
	if err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("detached call: %v", err)
	}
}

var update = flag.Bool("update", false, "rewrite testdata/gateway/call.json, the call the SDK sends")

// The SDK's mirror types write and read the gateway's own JSON, as kept in
// testdata/gateway: call.json is what the SDK sends (-update rewrites it),
// response.json and chunk.json what the host answers. The gateway's side
// checks the same files and writes its two (internal/gateway
// TestGatewayWireMatchesTheSDK, in the product's module, which this module
// cannot import), so a field renamed on either side fails one of the two.
func TestGatewayWireMatchesTheGateway(t *testing.T) {
	temp := 0.5
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := json.Marshal(gatewayCall{Request: GatewayRequest{Model: "small", Messages: []GatewayMessage{{Role: "user", Content: "hi"}},
		MaxTokens: 9, Temperature: &temp}, IdempotencyKey: "k", Deadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		var out bytes.Buffer
		_ = json.Indent(&out, b, "", "  ")
		out.WriteByte('\n')
		if err := os.WriteFile(filepath.Join("testdata", "gateway", "call.json"), out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want := gatewayGolden(t, "call.json"); !bytes.Equal(b, want) {
		t.Fatalf("call %s, want %s", b, want)
	}
	var resp GatewayResponse
	if err := json.Unmarshal(gatewayGolden(t, "response.json"), &resp); err != nil {
		t.Fatal(err)
	}
	gu := GatewayUsage{Input: 1, CachedInput: 2, CacheWrite: 3, Output: 4}
	if want := (GatewayResponse{ID: "i", Model: "m", Content: "c", FinishReason: "stop", Usage: gu, Provider: "p", Deployment: "d", CostMicros: 5}); resp != want {
		t.Fatalf("response %+v, want %+v", resp, want)
	}
	var c GatewayChunk
	if err := json.Unmarshal(gatewayGolden(t, "chunk.json"), &c); err != nil {
		t.Fatal(err)
	}
	if want := (GatewayChunk{Delta: "x", Done: true, FinishReason: "stop", Usage: gu, Provider: "p", Deployment: "d", CostMicros: 6}); !reflect.DeepEqual(c, want) {
		t.Fatalf("chunk %+v, want %+v", c, want)
	}
}

// gatewayGolden is testdata/gateway/name, compacted.
func gatewayGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "gateway", name))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out.Bytes()
}
