package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/gatewaypb"
)

// newGRPC serves svc over gRPC on a port of the OS's choosing and returns a
// client of it.
func newGRPC(t *testing.T, svc gateway.Service, opts GRPCOptions) gatewaypb.GatewayClient {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	gatewaypb.RegisterGatewayServer(srv, GRPCServer(svc, opts))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("serving: %v", err)
		}
	})
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return gatewaypb.NewGatewayClient(cc)
}

func pbRequest(model string) *gatewaypb.CompletionRequest {
	return &gatewaypb.CompletionRequest{Model: model, Messages: []*gatewaypb.Message{{Role: "user", Content: "hello"}}}
}

func TestGRPCComplete(t *testing.T) {
	svc := newFake(map[string]script{"m": {resp: answered}})
	client := newGRPC(t, svc, GRPCOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	in := pbRequest("m")
	in.MaxTokens, in.Temperature, in.Stop, in.User, in.IdempotencyKey = 30, proto.Float64(0), []string{"END"}, "u1", "k1"
	resp, err := client.Complete(metadata.AppendToOutgoingContext(ctx, SessionMetadata, "s-md"), in)
	if err != nil {
		t.Fatal(err)
	}
	want := &gatewaypb.CompletionResponse{Id: "resp-1", Model: "gpt-test-2025", Content: "hi there", FinishReason: "stop",
		Usage: &gatewaypb.Usage{Input: 7, CachedInput: 3, Output: 2}, Provider: "openai", Deployment: "openai-east", CostMicros: 42}
	if !proto.Equal(resp, want) {
		t.Fatalf("answer %v, want %v", resp, want)
	}
	call := svc.lastCall(t)
	req := call.Request
	if call.Session != "s-md" || call.IdempotencyKey != "k1" || req.MaxTokens != 30 || req.Temperature == nil || *req.Temperature != 0 ||
		req.TopP != nil || req.User != "u1" || len(req.Stop) != 1 || len(req.Messages) != 1 || !reflect.DeepEqual(req.Messages[0], hello[0]) {
		t.Fatalf("call %+v", call)
	}
	// The server's deadline is the client's as grpc-timeout carries it: a
	// little later, by the time the request took to arrive.
	if dl, _ := ctx.Deadline(); call.Deadline.IsZero() || call.Deadline.Sub(dl).Abs() > time.Second {
		t.Fatalf("call deadline %v, the RPC's %v", call.Deadline, dl)
	}

	// The request's session wins over the metadata; the user stands in
	// for both.
	in.Session = "s-req"
	if _, err := client.Complete(metadata.AppendToOutgoingContext(ctx, SessionMetadata, "s-md"), in); err != nil {
		t.Fatal(err)
	}
	if s := svc.lastCall(t).Session; s != "s-req" {
		t.Fatalf("session %q", s)
	}
	in.Session = ""
	if _, err := client.Complete(ctx, in); err != nil {
		t.Fatal(err)
	}
	if s := svc.lastCall(t).Session; s != "u1" {
		t.Fatalf("session %q", s)
	}
}

func TestGRPCStream(t *testing.T) {
	svc := newFake(map[string]script{"m": {chunks: streamed}, "broken": {chunks: broken}})
	client := newGRPC(t, svc, GRPCOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	recvAll := func(model string) ([]*gatewaypb.CompletionChunk, error) {
		stream, err := client.Stream(ctx, pbRequest(model))
		if err != nil {
			return nil, err
		}
		var got []*gatewaypb.CompletionChunk
		for {
			c, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return got, nil
			}
			if err != nil {
				return got, err
			}
			got = append(got, c)
		}
	}

	got, err := recvAll("m")
	if err != nil {
		t.Fatal(err)
	}
	want := []*gatewaypb.CompletionChunk{
		{Delta: "Hel", Provider: "anthropic", Deployment: "anthropic-main"}, {Delta: "lo"}, {Delta: " world"},
		{Done: true, FinishReason: "end_turn", Id: "msg_1", Model: "claude-x", Usage: &gatewaypb.Usage{Input: 10, CachedInput: 4, CacheWrite: 2, Output: 3},
			Provider: "anthropic", Deployment: "anthropic-main", CostMicros: 71},
	}
	if len(got) != len(want) {
		t.Fatalf("%d chunks, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("chunk %d: %v, want %v", i, got[i], want[i])
		}
	}

	got, err = recvAll("broken")
	if status.Code(err) != codes.Unavailable || len(got) != 1 || got[0].GetDelta() != "Hel" {
		t.Fatalf("chunks %v, error %v: want the first chunk then Unavailable", got, err)
	}
	if !strings.Contains(status.Convert(err).Message(), "midway") {
		t.Fatalf("message %q", status.Convert(err).Message())
	}

	_, err = recvAll("gpt-9")
	if status.Code(err) != codes.NotFound {
		t.Fatalf("unknown model: %v", err)
	}
	waitFor(t, "the service's streams to stop", func() bool { return svc.openStreams() == 0 })
}

// TestGRPCErrors checks every Service error's status, from Complete, from
// Stream, and from a stream's first chunk.
func TestGRPCErrors(t *testing.T) {
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			svc := newFake(map[string]script{"m": {err: tt.err}, "first": {chunks: []gateway.Chunk{{Err: tt.err}}}})
			client := newGRPC(t, svc, GRPCOptions{})
			ctx := context.Background()
			check := func(how string, err error) {
				t.Helper()
				st := status.Convert(err)
				if st.Code() != tt.grpc {
					t.Fatalf("%s: code %s, want %s (%v)", how, st.Code(), tt.grpc, err)
				}
				if !strings.Contains(st.Message(), tt.shown) || (tt.hidden != "" && strings.Contains(st.Message(), tt.hidden)) {
					t.Fatalf("%s: message %q: want %q in it and not %q", how, st.Message(), tt.shown, tt.hidden)
				}
				var delay time.Duration
				for _, d := range st.Details() {
					if ri, ok := d.(*errdetails.RetryInfo); ok {
						delay = ri.GetRetryDelay().AsDuration()
					}
				}
				if delay != tt.retryDelay {
					t.Fatalf("%s: retry delay %s, want %s", how, delay, tt.retryDelay)
				}
			}
			_, err := client.Complete(ctx, pbRequest("m"))
			check("complete", err)
			for _, model := range []string{"m", "first"} {
				stream, err := client.Stream(ctx, pbRequest(model))
				if err != nil {
					t.Fatal(err)
				}
				_, err = stream.Recv()
				check("stream "+model, err)
			}
		})
	}
}

func TestGRPCRefusals(t *testing.T) {
	svc := newFake(map[string]script{"m": {resp: answered}})
	client := newGRPC(t, svc, GRPCOptions{Auth: func(ctx context.Context) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("authorization"); len(v) == 1 && v[0] == "Bearer sk-test" {
			return "test-key", nil
		}
		return "", errors.New("unknown API key")
	}})
	ctx := context.Background()
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer sk-test")

	if _, err := client.Complete(ctx, pbRequest("m")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: %v", err)
	}
	if _, err := client.Complete(authed, pbRequest("m")); err != nil {
		t.Fatal(err)
	}
	if s := svc.lastCall(t).Session; s != "test-key" {
		t.Fatalf("session %q", s)
	}
	calls := svc.count("Complete")
	for name, in := range map[string]*gatewaypb.CompletionRequest{
		"no model":    {Messages: []*gatewaypb.Message{{Role: "user", Content: "x"}}},
		"no messages": {Model: "m"},
		"bad role":    {Model: "m", Messages: []*gatewaypb.Message{{Role: "tool", Content: "x"}}},
		"negative":    {Model: "m", MaxTokens: -1, Messages: []*gatewaypb.Message{{Role: "user", Content: "x"}}},
	} {
		if _, err := client.Complete(authed, in); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if n := svc.count("Complete"); n != calls {
		t.Fatalf("refused requests reached the service: %d calls, want %d", n, calls)
	}
}
