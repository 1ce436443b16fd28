// Package telemetry builds the agent's OpenTelemetry trace pipeline from
// its telemetry block: a tracer provider that samples, batches and
// exports spans by OTLP (HTTP or gRPC) to a collector. The subsystems
// that trace (the gateway's router) take the provider it hands out; with
// no telemetry block there is none, and they trace nothing.
//
// It owns the exporter and nothing else: it never sets OpenTelemetry's
// global provider, and never decides what is traced.
package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// The OTLP protocols an exporter speaks (otlp_protocol).
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Config is the telemetry block. The block itself turns tracing on.
type Config struct {
	// OTLPEndpoint is the collector's OTLP endpoint: "host:port" (plain
	// HTTP or gRPC, as a collector beside the agent listens), or a URL,
	// "https://collector:4318" for TLS ("http://" for plain). Empty: the
	// exporter's own default, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT when set (the exporters read the other
	// OTEL_EXPORTER_OTLP_* variables too: headers, timeout, certificates).
	OTLPEndpoint string `hcl:"otlp_endpoint,optional"`
	// OTLPProtocol is "http/protobuf" (the default, port 4318) or "grpc"
	// (port 4317).
	OTLPProtocol string `hcl:"otlp_protocol,optional"`
	// Headers are sent with every export (a collector's API key).
	Headers map[string]string `hcl:"headers,optional"`
	// SampleRatio is the share of calls traced, from 0 to 1 (default 1);
	// a call a caller's trace already samples or drops follows it.
	SampleRatio *float64 `hcl:"sample_ratio,optional"`
	// ServiceName names the agents in the traces (default "stickyd").
	ServiceName string `hcl:"service_name,optional"`
}

// Finish checks the block and fills its defaults.
func (c *Config) Finish() error {
	switch c.OTLPProtocol {
	case "":
		c.OTLPProtocol = ProtocolHTTP
	case ProtocolHTTP, ProtocolGRPC:
	default:
		return fmt.Errorf("telemetry: otlp_protocol %q: want %q or %q", c.OTLPProtocol, ProtocolHTTP, ProtocolGRPC)
	}
	if c.SampleRatio == nil {
		one := 1.0
		c.SampleRatio = &one
	}
	if r := *c.SampleRatio; r < 0 || r > 1 {
		return fmt.Errorf("telemetry: sample_ratio %v: want a share from 0 to 1", r)
	}
	if c.ServiceName == "" {
		c.ServiceName = "stickyd"
	}
	if e := c.OTLPEndpoint; strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("telemetry: otlp_endpoint %q: want host:port, or an http:// or https:// URL", e)
		}
	}
	return nil
}

// Tracing is a running trace pipeline. A nil *Tracing is none: it hands
// out no provider, and its Shutdown does nothing.
type Tracing struct {
	tp *sdktrace.TracerProvider
}

// New checks the block (Finish) and builds its pipeline for the agent
// named instance; a nil block builds none (nil). It dials nothing: spans
// are exported in batches as they end.
func New(ctx context.Context, c *Config, instance string) (*Tracing, error) {
	if c == nil {
		return nil, nil
	}
	if err := c.Finish(); err != nil {
		return nil, err
	}
	exp, err := exporter(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("telemetry: building the OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(c.ServiceName), semconv.ServiceInstanceID(instance)))
	if err != nil {
		return nil, fmt.Errorf("telemetry: describing the agent: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*c.SampleRatio))))
	return &Tracing{tp: tp}, nil
}

// exporter is the block's OTLP exporter.
func exporter(ctx context.Context, c *Config) (*otlptrace.Exporter, error) {
	e := c.OTLPEndpoint
	isURL := strings.Contains(e, "://")
	if c.OTLPProtocol == ProtocolGRPC {
		opts := []otlptracegrpc.Option{}
		switch {
		case isURL:
			opts = append(opts, otlptracegrpc.WithEndpointURL(e))
		case e != "":
			opts = append(opts, otlptracegrpc.WithEndpoint(e), otlptracegrpc.WithInsecure())
		}
		if len(c.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(c.Headers))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	opts := []otlptracehttp.Option{}
	switch {
	case isURL:
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(e, "/")+tracesPath(e)))
	case e != "":
		opts = append(opts, otlptracehttp.WithEndpoint(e), otlptracehttp.WithInsecure())
	}
	if len(c.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(c.Headers))
	}
	return otlptracehttp.New(ctx, opts...)
}

// tracesPath is the path to add to an endpoint URL: /v1/traces unless it
// names a path of its own.
func tracesPath(e string) string {
	if u, err := url.Parse(e); err == nil && strings.Trim(u.Path, "/") != "" {
		return ""
	}
	return "/v1/traces"
}

// TracerProvider is what a subsystem traces with (nil: trace nothing).
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return nil // not a nil *sdktrace.TracerProvider in the interface
	}
	return t.tp
}

// Shutdown exports the spans still held (within ctx) and stops the
// exporter. It is idempotent.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: exporting the last spans: %w", err)
	}
	return nil
}
