package worker

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
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
			var call gateway.Call
			if err := json.Unmarshal(gc.Call, &call); err != nil || call.IdempotencyKey == "" {
				t.Errorf("call %s: %v", gc.Call, err)
			}
			sessions <- gc.Session
			refuse := func(code protocol.Error_Code, kind, msg string) {
				_ = p.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Error{Error: &protocol.Error{Code: code, Kind: kind, Message: msg}}})
			}
			chunk := func(c gateway.Chunk, errText, kind string) {
				b, _ := json.Marshal(c)
				_ = p.Notify(&protocol.Envelope{Body: &protocol.Envelope_GatewayChunk{GatewayChunk: &protocol.GatewayChunk{
					CallId: env.Id, Chunk: b, Last: c.Done || errText != "", Error: errText, ErrorKind: kind}}})
			}
			switch {
			case call.Request.Model != "small" && call.Request.Model != "midway":
				refuse(protocol.Error_BAD_REQUEST, "unknown_model", `unknown model "`+call.Request.Model+`"`)
			case !gc.Stream:
				b, _ := json.Marshal(gateway.Response{Content: "hello world", FinishReason: "stop", CostMicros: 55,
					Usage: gateway.Usage{Input: 12, CachedInput: 30, Output: 7}, Provider: "openai", Deployment: "local"})
				_ = p.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_GatewayReply{GatewayReply: &protocol.GatewayReply{Response: b}}})
			case call.Request.Model == "midway":
				chunk(gateway.Chunk{Delta: "hel"}, "", "")
				chunk(gateway.Chunk{}, "the provider did not answer: server", "server")
				refuse(protocol.Error_UNAVAILABLE, "server", "the provider did not answer: server")
			default:
				chunk(gateway.Chunk{Delta: "hello"}, "", "")
				chunk(gateway.Chunk{Delta: " world"}, "", "")
				chunk(gateway.Chunk{Done: true, FinishReason: "stop", Usage: &gateway.Usage{Output: 7}}, "", "")
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

// The SDK's mirror types read and write the gateway's own JSON: a field
// renamed on either side fails here.
func TestGatewayWireMatchesTheGateway(t *testing.T) {
	temp := 0.5
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	b, _ := json.Marshal(gatewayCall{Request: GatewayRequest{Model: "small", Messages: []GatewayMessage{{Role: "user", Content: "hi"}},
		MaxTokens: 9, Temperature: &temp}, IdempotencyKey: "k", Deadline: deadline})
	var call gateway.Call
	if err := json.Unmarshal(b, &call); err != nil {
		t.Fatal(err)
	}
	want := gateway.Call{Request: gateway.Request{Model: "small", Messages: []gateway.Message{{Role: "user", Content: "hi"}}, MaxTokens: 9,
		Temperature: &temp}, IdempotencyKey: "k", Deadline: deadline}
	if !reflect.DeepEqual(call, want) {
		t.Fatalf("call %+v, want %+v", call, want)
	}
	u := gateway.Usage{Input: 1, CachedInput: 2, CacheWrite: 3, Output: 4}
	b, _ = json.Marshal(gateway.Response{ID: "i", Model: "m", Content: "c", FinishReason: "stop", Usage: u, Provider: "p", Deployment: "d", CostMicros: 5})
	var resp GatewayResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	gu := GatewayUsage{Input: 1, CachedInput: 2, CacheWrite: 3, Output: 4}
	if want := (GatewayResponse{ID: "i", Model: "m", Content: "c", FinishReason: "stop", Usage: gu, Provider: "p", Deployment: "d", CostMicros: 5}); resp != want {
		t.Fatalf("response %+v, want %+v", resp, want)
	}
	b, _ = json.Marshal(gateway.Chunk{Delta: "x", Done: true, FinishReason: "stop", Usage: &u, Provider: "p", Deployment: "d", CostMicros: 6})
	var c GatewayChunk
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.Delta != "x" || !c.Done || c.FinishReason != "stop" || c.Usage != gu || c.Provider != "p" || c.Deployment != "d" || c.CostMicros != 6 {
		t.Fatalf("chunk %+v", c)
	}
}
