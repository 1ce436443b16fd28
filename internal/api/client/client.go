// Package client is the one HTTP client of the agent's admin API (/v1/...,
// served by internal/api and the routes the agent adds to it): the CLI and
// the Terraform provider call the API through it and through nothing else.
// It owns the transport (address, token, TLS, timeouts), the wording of
// errors (an answer outside 2xx is an *Error with the API's status and
// message), one typed method per route, and the wire types those methods
// answer with.
//
// The wire types are this package's own: it must never import the packages
// that make the answers (fsm, host, move, monitor, governor, placement,
// raftnode, gateway, supervisor, agent), so that a client of the API does
// not link the agent. wire_test.go keeps them in step with the server's.
//
// It does not retry and does not look for the leader: an agent forwards to
// the leader what must run there, and a call that fails is the caller's to
// repeat.
package client

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// How long a call may take and how much of an answer it reads.
const (
	// dialTimeout bounds connecting and the TLS handshake, for every
	// call, streams included.
	dialTimeout = 5 * time.Second
	// callTimeout bounds a whole call that is not a stream: a move waits
	// for the freeze (move.freeze_timeout, 5 s by default) and the log.
	callTimeout = 60 * time.Second
	// maxBody bounds what a call reads of an answer.
	maxBody = 64 << 20
	// maxErrorBody bounds what is read of an answer outside 2xx.
	maxErrorBody = 64 << 10
)

// Sentinel errors. Those of New each say which part of the Config is
// wrong, so that a caller can say it in its own words (a flag, a provider
// attribute).
var (
	// ErrNoToken is returned by New when Config.Token is empty: every
	// route needs a token.
	ErrNoToken = errors.New("no admin token")
	// ErrBadAddress is returned (wrapped) by New when Config.Address is
	// not an http or https URL with a host.
	ErrBadAddress = errors.New("want http(s)://HOST:PORT")
	// ErrNoPEM is returned (wrapped) by New when Config.CAFile holds no
	// PEM certificate. A file that cannot be read is its *fs.PathError.
	ErrNoPEM = errors.New("holds no PEM certificate")
	// ErrNoJob is a DecodeError's cause when a route that starts a job
	// answered without the job's id.
	ErrNoJob = errors.New("the answer names no job")
)

// Config says where the admin API is and how to reach it.
type Config struct {
	// Address is the API's URL, http(s)://HOST:PORT with an optional path
	// prefix. Without a scheme it is http, or https when CAFile is set.
	Address string
	// Token is the admin token (or the read token, for the calls that
	// only read), sent as X-Stickyd-Token. Required.
	Token string
	// CAFile is a PEM file of the CA that an https API's certificate is
	// checked against (the agents' tls.https); empty: the system's roots.
	CAFile string
	// TLSServerName is the name to check in that certificate when the
	// address is not one it names (server.global.stickyd). It is used
	// with CAFile only.
	TLSServerName string
	// Transport, when set, carries the calls in place of one New builds
	// (CAFile and TLSServerName are then unused): the agents share one,
	// with their mutual TLS, across the clients of each other's APIs.
	Transport *http.Transport
	// Timeout bounds a whole call that is not a stream (default 60 s);
	// MaxAnswerBytes what a call reads of an answer (default 64 MiB: a
	// parked package fetched by another agent needs more).
	Timeout        time.Duration
	MaxAnswerBytes int64
}

// Client calls the admin API. It is safe for concurrent use; Close it when
// done.
type Client struct {
	base  *url.URL // scheme://host[:port][/prefix], no trailing slash
	token string
	tr    *http.Transport
	// max bounds what a call reads of an answer.
	max int64
	// call bounds a whole call; stream only bounds the dial and the TLS
	// handshake, since a drain or a job answers for as long as its moves
	// take (the caller's context ends it).
	call, stream *http.Client
}

// New checks cfg and returns a client; it calls nothing.
func New(cfg Config) (*Client, error) {
	if cfg.Token == "" {
		return nil, ErrNoToken
	}
	scheme := "http://"
	var tlsCfg *tls.Config
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s %w", cfg.CAFile, ErrNoPEM)
		}
		scheme, tlsCfg = "https://", &tls.Config{RootCAs: pool, ServerName: cfg.TLSServerName, MinVersion: tls.VersionTLS12}
	}
	raw := strings.TrimSpace(cfg.Address)
	if !strings.Contains(raw, "://") {
		raw = scheme + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("address %q: %w", cfg.Address, ErrBadAddress)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	tr := cfg.Transport
	if tr == nil {
		tr = NewTransport(tlsCfg)
	}
	timeout, limit := cmp.Or(cfg.Timeout, callTimeout), cmp.Or(cfg.MaxAnswerBytes, maxBody)
	return &Client{
		base:   u,
		token:  cfg.Token,
		tr:     tr,
		max:    limit,
		call:   &http.Client{Transport: tr, Timeout: timeout},
		stream: &http.Client{Transport: tr},
	}, nil
}

// NewTransport is the transport of a client: bounded dials and TLS
// handshakes, idle connections kept for 30 s, and tlsCfg (nil: the
// system's roots).
func NewTransport(tlsCfg *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   dialTimeout,
		IdleConnTimeout:       30 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       tlsCfg,
		MaxIdleConnsPerHost:   16,
	}
}

// Address is the API's base URL, as the calls use it: scheme, host and
// path prefix, without a trailing slash.
func (c *Client) Address() string { return c.base.String() }

// Token is the token the client sends.
func (c *Client) Token() string { return c.token }

// Close drops the client's idle connections. The client stays usable.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// Error is an answer outside 2xx: its status and the API's message
// ({"error": "..."}), or, for an answer that is not the API's (a proxy's
// page), the status and the answer's first line.
type Error struct {
	Status  int
	Message string
	// Kind is the API's name for the refusal's cause, when it gives one
	// ({"kind": "busy"}, fsm.KindError): agents rebuild the sentinel.
	Kind string
}

func (e *Error) Error() string { return e.Message }

// IsNotFound reports whether err is the API's 404.
func IsNotFound(err error) bool {
	var ae *Error
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// DecodeError is a 2xx answer that is not what the route answers: Body is
// the answer as it came, for a caller that quotes it.
type DecodeError struct {
	Method, Path string
	Body         []byte
	Err          error
}

func (e *DecodeError) Error() string { return "decoding the answer: " + e.Err.Error() }

func (e *DecodeError) Unwrap() error { return e.Err }

// CallOption changes one call.
type CallOption func(*callOptions)

type callOptions struct {
	body *[]byte
}

// KeepBody stores the answer's body in *body, as it came, besides decoding
// it: for a caller that shows the API's JSON untouched (the CLI's -json)
// or quotes it.
func KeepBody(body *[]byte) CallOption {
	return func(o *callOptions) { o.body = body }
}

// get calls GET path and decodes the answer into out.
func (c *Client) get(ctx context.Context, path string, query url.Values, out any, opts []CallOption) error {
	return c.decode(ctx, http.MethodGet, path, query, nil, out, opts)
}

// decode calls method path with body (encoded as JSON unless nil) and
// decodes a 2xx answer into out, unless out is nil.
func (c *Client) decode(ctx context.Context, method, path string, query url.Values, body, out any, opts []CallOption) error {
	b, err := c.do(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	keepBody(opts, b)
	if out == nil {
		return nil
	}
	return unmarshal(method, path, b, out)
}

// keepBody hands b to the KeepBody among opts, if any.
func keepBody(opts []CallOption, b []byte) {
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.body != nil {
		*o.body = b
	}
}

// unmarshal decodes the answer b of method path into out; an answer that
// does not fit is a *DecodeError.
func unmarshal(method, path string, b []byte, out any) error {
	if err := json.Unmarshal(b, out); err != nil {
		return &DecodeError{Method: method, Path: path, Body: b, Err: err}
	}
	return nil
}

// do calls method path and returns the answer's body.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	resp, err := c.send(ctx, c.call, method, path, query, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.max))
	if err != nil {
		return nil, c.transportErr(err)
	}
	return b, nil
}

// Raw calls method path with body as it is (a raft entry, a parked
// package: not JSON) and returns the answer's body as it came. Agents call
// each other's internal routes through it.
func (c *Client) Raw(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var rd any
	if body != nil {
		rd = rawBody(body)
	}
	return c.do(ctx, method, path, nil, rd)
}

// rawBody is a request body sent as it is.
type rawBody []byte

// NewRequest is a request to path (with its query) carrying the client's
// token, for a caller that reads the answer as it streams (the gateway
// passing a streamed answer on): send it with StreamClient.
func (c *Client) NewRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Stickyd-Token", c.token)
	return req, nil
}

// StreamClient sends requests over the client's transport with no timeout
// but their context's (and the dial's).
func (c *Client) StreamClient() *http.Client { return c.stream }

// open calls method path and returns the answer's body to read as it
// comes; only ctx (and the dial timeout) bounds it. The caller closes it.
func (c *Client) open(ctx context.Context, method, path string, query url.Values) (io.ReadCloser, error) {
	resp, err := c.send(ctx, c.stream, method, path, query, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// send makes the call and turns an answer outside 2xx into an *Error. path
// comes escaped (url.PathEscape on each name in it).
func (c *Client) send(ctx context.Context, hc *http.Client, method, path string, query url.Values, body any) (*http.Response, error) {
	u := c.base.String() + path
	if q := query.Encode(); q != "" {
		u += "?" + q
	}
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case rawBody:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding the request: %w", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("building the request: %w", err)
	}
	req.Header.Set("X-Stickyd-Token", c.token)
	req.Header.Set("Accept", "application/json")
	switch body.(type) {
	case nil:
	case rawBody:
		req.Header.Set("Content-Type", "application/octet-stream")
	default:
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, c.transportErr(err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return nil, errorFromBody(resp.StatusCode, b)
}

// errorFromBody reads {"error": "..."}; an answer without one (a proxy's
// page, say) is summed up by its status and first line.
func errorFromBody(status int, b []byte) *Error {
	var e struct {
		Error string `json:"error"`
		Kind  string `json:"kind"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return &Error{Status: status, Message: e.Error, Kind: e.Kind}
	}
	msg := fmt.Sprintf("the admin API answered %d %s", status, http.StatusText(status))
	if line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n"); line != "" {
		if len(line) > 200 {
			line = line[:200] + "..."
		}
		msg += ": " + line
	}
	return &Error{Status: status, Message: msg}
}

// transportErr says what went wrong below HTTP, naming the address.
func (c *Client) transportErr(err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted: %w", context.Canceled)
	}
	inner := err
	var ue *url.Error
	if errors.As(err, &ue) {
		inner = ue.Err
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("cannot reach the stickyd admin API at %s: %w", c.base, inner)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("no answer from the stickyd admin API at %s within %s: %w", c.base, callTimeout, inner)
	}
	return fmt.Errorf("calling the stickyd admin API at %s: %w", c.base, inner)
}
