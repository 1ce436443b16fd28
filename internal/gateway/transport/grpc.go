package transport

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/gatewaypb"
)

// GRPCOptions configures GRPCServer.
type GRPCOptions struct {
	// Auth, if set, authenticates every call from its context (its
	// metadata or peer): it returns the caller's name, the session that pays
	// when neither the request nor the x-stickyd-session metadata names
	// one. An error that is a gRPC status is returned as it is; any other
	// is Unauthenticated with the error's text. Nil means no
	// authentication.
	Auth func(ctx context.Context) (session string, err error)
	// Logger logs failed calls. Nil means no logs.
	Logger hclog.Logger
}

// GRPCServer serves svc as the gRPC service gatewaypb.Gateway; register it
// with gatewaypb.RegisterGatewayServer. The session that pays is the
// request's session, else the x-stickyd-session metadata, else the
// request's user, else the name opts.Auth returns; the call's deadline is
// the RPC's. Errors are statuses (see gateway.proto); a stream that fails
// after its first chunk ends with Unavailable.
func GRPCServer(svc gateway.Service, opts GRPCOptions) gatewaypb.GatewayServer {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	return &grpcServer{svc: svc, auth: opts.Auth, log: opts.Logger}
}

type grpcServer struct {
	gatewaypb.UnimplementedGatewayServer
	svc  gateway.Service
	auth func(ctx context.Context) (string, error)
	log  hclog.Logger
}

var _ gatewaypb.GatewayServer = (*grpcServer)(nil)

func (s *grpcServer) Complete(ctx context.Context, in *gatewaypb.CompletionRequest) (*gatewaypb.CompletionResponse, error) {
	call, err := s.call(ctx, in)
	if err != nil {
		return nil, err
	}
	resp, err := s.svc.Complete(ctx, call)
	if err != nil {
		return nil, s.status(err, "complete", call)
	}
	return &gatewaypb.CompletionResponse{
		Id:           resp.ID,
		Model:        resp.Model,
		Content:      resp.Content,
		FinishReason: resp.FinishReason,
		Usage:        pbUsage(resp.Usage),
		Provider:     resp.Provider,
		Deployment:   resp.Deployment,
		CostMicros:   resp.CostMicros,
	}, nil
}

func (s *grpcServer) Stream(in *gatewaypb.CompletionRequest, stream grpc.ServerStreamingServer[gatewaypb.CompletionChunk]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	call, err := s.call(ctx, in)
	if err != nil {
		return err
	}
	ch, err := s.svc.Stream(ctx, call)
	if err != nil {
		return s.status(err, "stream", call)
	}
	defer func() {
		// Cancelling makes the Service close the channel (its contract);
		// draining it lets its sender finish.
		cancel()
		for range ch {
		}
	}()
	sent := false
	for {
		c, ok := <-ch
		if !ok {
			c = gateway.Chunk{Err: errStreamCut}
		}
		switch {
		case c.Err != nil && !sent:
			return s.status(c.Err, "stream", call)
		case c.Err != nil:
			s.log.Warn("gateway stream failed midway", "model", call.Request.Model, "session", call.Session, "error", c.Err)
			return status.Error(codes.Unavailable, "the stream failed midway: "+toAPIError(c.Err).Message)
		case c.Done:
			out := &gatewaypb.CompletionChunk{Id: c.ID, Model: c.Model, Delta: c.Delta, Done: true, FinishReason: c.FinishReason,
				Provider: c.Provider, Deployment: c.Deployment, CostMicros: c.CostMicros}
			if c.Usage != nil {
				out.Usage = pbUsage(*c.Usage)
			}
			return stream.Send(out)
		case c.Delta != "" || (!sent && c.Provider != ""):
			// The first chunk names who serves the stream.
			out := &gatewaypb.CompletionChunk{Delta: c.Delta}
			if !sent {
				out.Provider, out.Deployment = c.Provider, c.Deployment
			}
			if err := stream.Send(out); err != nil {
				return err
			}
			sent = true
		}
	}
}

// call turns a request into the gateway's call, or refuses it with
// InvalidArgument (or Auth's refusal).
func (s *grpcServer) call(ctx context.Context, in *gatewaypb.CompletionRequest) (gateway.Call, error) {
	var caller string
	if s.auth != nil {
		var err error
		if caller, err = s.auth(ctx); err != nil {
			if st, ok := status.FromError(err); ok {
				return gateway.Call{}, st.Err()
			}
			return gateway.Call{}, status.Error(codes.Unauthenticated, err.Error())
		}
	}
	req := gateway.Request{
		Model:       in.GetModel(),
		MaxTokens:   int(in.GetMaxTokens()),
		Temperature: in.Temperature,
		TopP:        in.TopP,
		Stop:        in.GetStop(),
		User:        in.GetUser(),
	}
	for _, m := range in.GetMessages() {
		req.Messages = append(req.Messages, gateway.Message{Role: m.GetRole(), Content: m.GetContent()})
	}
	if err := checkRequest(req); err != nil {
		return gateway.Call{}, status.Error(codes.InvalidArgument, toAPIError(err).Message)
	}
	var fromMD string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(SessionMetadata); len(v) > 0 {
			fromMD = v[0]
		}
	}
	call := gateway.Call{
		Request:        req,
		Session:        sessionOf(caller, in.GetSession(), fromMD, req.User),
		Key:            caller,
		IdempotencyKey: in.GetIdempotencyKey(),
	}
	if dl, ok := ctx.Deadline(); ok {
		call.Deadline = dl
	}
	return call, nil
}

// status maps a Service error to a gRPC status, with a RetryInfo detail
// when the caller should wait before retrying.
func (s *grpcServer) status(err error, rpc string, call gateway.Call) error {
	ae := toAPIError(err)
	switch {
	case ae.Code == codes.Canceled:
		return status.Error(codes.Canceled, ae.Message)
	case ae.Code == codes.Internal || ae.Code == codes.Unavailable:
		s.log.Warn("gateway call failed", "rpc", rpc, "model", call.Request.Model, "session", call.Session, "error", err)
	default:
		s.log.Debug("gateway call refused", "rpc", rpc, "model", call.Request.Model, "session", call.Session, "error", err)
	}
	st := status.New(ae.Code, ae.Message)
	if ae.RetryAfter > 0 {
		withRetry, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(ae.RetryAfter)})
		if derr != nil {
			s.log.Warn("adding a retry delay to a status", "error", derr)
		} else {
			st = withRetry
		}
	}
	return st.Err()
}

func pbUsage(u gateway.Usage) *gatewaypb.Usage {
	return &gatewaypb.Usage{Input: u.Input, CachedInput: u.CachedInput, CacheWrite: u.CacheWrite, Output: u.Output}
}
