// Package bedrock is the gateway's adapter for Amazon Bedrock Runtime's
// Converse and ConverseStream APIs, through the official AWS SDK for Go
// (its bedrockruntime client: SigV4 signing, the credentials' standard
// chain, the binary event stream): it turns a gateway.Request into
// Converse's messages and content blocks (text, image bytes, toolUse,
// toolResult), tools and JSON-schema output, and Converse's answers,
// stream events, usage (cache reads and writes included) and exceptions
// into the gateway's types. Embeddings go to InvokeModel for the
// embedding models whose bodies it knows (Titan, Cohere); any other model
// is refused naming it. What Converse cannot carry is refused with
// gateway.Unsupported naming the parameter.
//
// It owns the translation and nothing else: the SDK's own retries are
// switched off (the router retries, waits and fails over), it keeps no
// state between calls, and never logs the credentials.
package bedrock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/gateway"
)

// Defaults for the zero fields of Config.
const (
	DefaultTimeout      = 60 * time.Second
	DefaultStallTimeout = 30 * time.Second
)

const api = "Bedrock's Converse API"

// ErrNoRegion is New's refusal of a Config without a region.
var ErrNoRegion = errors.New("bedrock: no region (us-east-1, eu-central-1...)")

// Config configures an Adapter. Zero fields take the defaults above.
type Config struct {
	// Region is the AWS region of the Bedrock Runtime endpoint; required.
	Region string
	// Endpoint, when set, replaces the region's endpoint (a VPC
	// endpoint, a proxy): an absolute http(s) URL.
	Endpoint string
	// Profile names a profile of the shared AWS configuration files
	// (empty: the default chain's choice). The credentials come from the
	// SDK's standard chain: the environment (AWS_ACCESS_KEY_ID...), the
	// shared files, SSO, web identity, the container's or the instance's
	// role.
	Profile string
	// HTTPClient sends the requests (default: the SDK's, which honours
	// AWS_CA_BUNDLE; a client given here must not be used with it). Its
	// Timeout must be zero or longer than any stream.
	HTTPClient *http.Client
	// Timeout bounds a Complete, Embed or HealthCheck call whole, and a
	// Stream call until its answer's headers (default DefaultTimeout).
	Timeout time.Duration
	// StallTimeout is how long a stream may bring no event before it
	// fails with KindTimeout (default DefaultStallTimeout).
	StallTimeout time.Duration
	// Logger receives the adapter's logs (nil: none).
	Logger hclog.Logger
}

// Adapter calls Bedrock Runtime. It is safe for concurrent use.
type Adapter struct {
	client       *bedrockruntime.Client
	timeout      time.Duration
	stallTimeout time.Duration
	log          hclog.Logger
}

var (
	_ gateway.Adapter  = (*Adapter)(nil)
	_ gateway.Embedder = (*Adapter)(nil)
)

// New returns an Adapter for cfg. Loading the SDK's configuration reads
// the environment and the shared files only: credentials are fetched
// (and refreshed) on the first call, whose error says if there are none.
func New(cfg Config) (*Adapter, error) {
	if cfg.Region == "" {
		return nil, ErrNoRegion
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("bedrock: endpoint %q: want an absolute http(s) URL", cfg.Endpoint)
		}
	}
	if cfg.Timeout < 0 || cfg.StallTimeout < 0 {
		return nil, errors.New("bedrock: negative timeout")
	}
	var hc aws.HTTPClient = cfg.HTTPClient
	if cfg.HTTPClient == nil {
		// The SDK's own client, so that AWS_CA_BUNDLE still applies, with
		// the gateway's idle connections per provider.
		hc = awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			g := gateway.Transport()
			t.MaxIdleConns, t.MaxIdleConnsPerHost = g.MaxIdleConns, g.MaxIdleConnsPerHost
		})
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		config.WithHTTPClient(hc),
		// The router retries, waits out rate limits and fails over.
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
	}
	if cfg.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(cfg.Profile))
	}
	// No call is made: the context bounds reading the environment and
	// the shared files, which take none.
	awsCfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("bedrock: loading the AWS configuration: %w", err)
	}
	if awsCfg.Credentials != nil {
		awsCfg.Credentials = credentialsErrors{awsCfg.Credentials}
	}
	a := &Adapter{
		client: bedrockruntime.NewFromConfig(awsCfg, func(o *bedrockruntime.Options) {
			if cfg.Endpoint != "" {
				o.BaseEndpoint = aws.String(strings.TrimRight(cfg.Endpoint, "/"))
			}
			// Wrapped here, once the SDK has tuned its own client (the
			// dial's and TLS handshake's timeouts: only a client of
			// its own type gets them), before these options run.
			o.HTTPClient = readOnlyBodies{o.HTTPClient}
		}),
		timeout:      cfg.Timeout,
		stallTimeout: cfg.StallTimeout,
		log:          cfg.Logger,
	}
	if a.timeout == 0 {
		a.timeout = DefaultTimeout
	}
	if a.stallTimeout == 0 {
		a.stallTimeout = DefaultStallTimeout
	}
	if a.log == nil {
		a.log = hclog.NewNullLogger()
	}
	a.log = a.log.With("adapter", "bedrock")
	return a, nil
}

// readOnlyBodies sends the SDK's requests with bodies that can only be
// read and closed, so that no answer's connection is closed under it.
//
// The SDK wraps a request's body so that, once closed, it reads as ended
// (io.EOF) both by Read and by WriteTo, and closes it as soon as Do
// returns: when the answer's headers have come, which a server may send
// as soon as it has the body. Go's transport, once it has written a body
// of known length, reads it once more (an io.Copy into io.Discard, which
// takes WriteTo when there is one) to find any extra bytes; if the SDK
// closed the body in between, that io.EOF from WriteTo is an error to
// io.Copy (from Read it is the end), the request's write fails, and the
// transport closes the connection while the answer is still being read:
// a stream whose next event had not yet arrived then failed with "use of
// closed network connection". Without WriteTo, io.Copy reads, and a
// closed body is just an ended one.
type readOnlyBodies struct{ bedrockruntime.HTTPClient }

// readCloser hides every method of its body but Read and Close.
type readCloser struct{ io.ReadCloser }

func (c readOnlyBodies) Do(r *http.Request) (*http.Response, error) {
	if _, ok := r.Body.(io.WriterTo); ok && r.Body != http.NoBody {
		r2 := *r // the SDK closes r.Body itself once Do returns
		r2.Body = readCloser{r.Body}
		r = &r2
	}
	return c.HTTPClient.Do(r)
}

// Complete sends req to Converse and returns the answer.
func (a *Adapter) Complete(ctx context.Context, req gateway.Request) (gateway.Response, error) {
	in, err := buildInput(req)
	if err != nil {
		return gateway.Response{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	out, err := a.client.Converse(cctx, in.converse())
	if err != nil {
		return gateway.Response{}, classify(ctx, "calling Converse", err)
	}
	resp := gateway.Response{Model: req.Model, FinishReason: finishReason(out.StopReason), Usage: usage(out.Usage)}
	if id, ok := awsmiddleware.GetRequestIDMetadata(out.ResultMetadata); ok {
		resp.ID = id
	}
	if out.Usage == nil {
		a.log.Warn("answer without usage", "model", req.Model)
	}
	msg, ok := out.Output.(*types.ConverseOutputMemberMessage)
	if !ok {
		return gateway.Response{}, &gateway.ProviderError{Kind: gateway.KindServer, Message: fmt.Sprintf("Converse answered no message (%T)", out.Output)}
	}
	var text strings.Builder
	for _, block := range msg.Value.Content {
		switch b := block.(type) {
		case *types.ContentBlockMemberText:
			text.WriteString(b.Value)
		case *types.ContentBlockMemberToolUse:
			args, err := documentJSON(b.Value.Input)
			if err != nil {
				return gateway.Response{}, &gateway.ProviderError{Kind: gateway.KindServer, Message: fmt.Sprintf("reading a toolUse's input: %v", err)}
			}
			resp.ToolCalls = append(resp.ToolCalls, gateway.ToolCall{ID: aws.ToString(b.Value.ToolUseId), Name: aws.ToString(b.Value.Name), Arguments: args})
		}
	}
	resp.Content = text.String()
	return resp, nil
}

// HealthCheck makes Bedrock Runtime's cheapest signed call, a listing of
// one asynchronous invocation: an answer, or a refusal for want of that
// permission (AccessDeniedException), proves the endpoint answers and
// takes the credentials and their signature; anything else is the
// classified error.
func (a *Adapter) HealthCheck(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	_, err := a.client.ListAsyncInvokes(cctx, &bedrockruntime.ListAsyncInvokesInput{MaxResults: aws.Int32(1)})
	if err == nil {
		return nil
	}
	var pe *gateway.ProviderError
	if err := classify(ctx, "checking health", err); !errors.As(err, &pe) || pe.Type != "AccessDeniedException" {
		return err
	}
	return nil
}

// finishReason maps Converse's stopReason to the gateway's words.
func finishReason(r types.StopReason) string {
	switch r {
	case types.StopReasonEndTurn, types.StopReasonStopSequence:
		return "stop"
	case types.StopReasonMaxTokens, types.StopReasonModelContextWindowExceeded:
		return "length"
	case types.StopReasonToolUse:
		return "tool_calls"
	case types.StopReasonGuardrailIntervened, types.StopReasonContentFiltered:
		return "content_filter"
	}
	return strings.ToLower(string(r))
}

// usage converts Converse's usage: its inputTokens count neither the
// cache's reads nor its writes.
func usage(u *types.TokenUsage) gateway.Usage {
	if u == nil {
		return gateway.Usage{}
	}
	return gateway.Usage{
		Input:       int64(aws.ToInt32(u.InputTokens)),
		CachedInput: int64(aws.ToInt32(u.CacheReadInputTokens)),
		CacheWrite:  int64(aws.ToInt32(u.CacheWriteInputTokens)),
		Output:      int64(aws.ToInt32(u.OutputTokens)),
	}
}
