package command

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"
)

// Where the admin API is and how long a call may take.
const (
	// DefaultAddress is the admin API address when neither -address nor
	// $STICKYD_ADDR gives one (the agent's default admin.address).
	DefaultAddress = "http://127.0.0.1:4650"

	// dialTimeout bounds connecting, for every call, streams included.
	dialTimeout = 5 * time.Second
	// callTimeout bounds a whole call that is not a stream: a move waits
	// for the freeze (move.freeze_timeout, 5 s by default) and the log.
	callTimeout = 60 * time.Second
	// maxBody bounds what a call reads of an answer.
	maxBody = 64 << 20
)

// errNoToken is returned before any call when no admin token was given.
var errNoToken = errors.New("no admin token: set STICKYD_TOKEN or pass -token")

// apiOptionsHelp is the help of the flags every admin API command takes.
const apiOptionsHelp = `
HTTP API Options:

  -address=ADDR      The admin API address. Default $STICKYD_ADDR, else
                     ` + DefaultAddress + `. consul://SERVICE asks Consul
                     ($CONSUL_HTTP_ADDR, $CONSUL_HTTP_TOKEN) for a healthy
                     server of SERVICE (consul:// alone: stickyd-server).
  -token=TOKEN       The admin token. Default $STICKYD_TOKEN.
  -ca-file=FILE      The CA an https:// admin API's certificate is checked
                     against (tls.https; stickyd tls ca create's
                     stickyd-agent-ca.pem). Default $STICKYD_CACERT; with
                     it, an address without a scheme (and consul://) is
                     https.
  -tls-server-name=NAME
                     The name to check in that certificate, when the
                     address is not one it names (server.global.stickyd).
                     Default $STICKYD_TLS_SERVER_NAME.`

// apiOptions are the flags every admin API command takes.
type apiOptions struct {
	address    string
	token      string
	caFile     string
	serverName string
}

// apiFlagSet is a FlagSet with -address and -token, whose defaults are read
// from the environment now. Parse it with parseArgs, which reports errors.
func (m *Meta) apiFlagSet(name string) (*flag.FlagSet, *apiOptions) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	o := &apiOptions{}
	addr := os.Getenv("STICKYD_ADDR")
	if addr == "" {
		addr = DefaultAddress
	}
	fs.StringVar(&o.address, "address", addr, "")
	fs.StringVar(&o.token, "token", os.Getenv("STICKYD_TOKEN"), "")
	fs.StringVar(&o.caFile, "ca-file", os.Getenv("STICKYD_CACERT"), "")
	fs.StringVar(&o.serverName, "tls-server-name", os.Getenv("STICKYD_TLS_SERVER_NAME"), "")
	return fs, o
}

// client checks the options and returns a client. It fails, without
// calling anything, when there is no token or the address is not a URL.
func (o *apiOptions) client() (*apiClient, error) {
	if o.token == "" {
		return nil, errNoToken
	}
	scheme := "http://"
	var tlsCfg *tls.Config
	if o.caFile != "" {
		pem, err := os.ReadFile(o.caFile)
		if err != nil {
			return nil, fmt.Errorf("reading -ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-ca-file %s holds no PEM certificate", o.caFile)
		}
		scheme, tlsCfg = "https://", &tls.Config{RootCAs: pool, ServerName: o.serverName, MinVersion: tls.VersionTLS12}
	}
	raw := strings.TrimSpace(o.address)
	if service, ok := strings.CutPrefix(raw, "consul://"); ok {
		addr, err := serverFromConsul(strings.TrimRight(service, "/"))
		if err != nil {
			return nil, err
		}
		raw = scheme + addr
	}
	if !strings.Contains(raw, "://") {
		raw = scheme + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bad -address %q: want http://HOST:PORT", o.address)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   dialTimeout,
		IdleConnTimeout:       30 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       tlsCfg,
	}
	return &apiClient{
		base:   u,
		token:  o.token,
		tr:     tr,
		call:   &http.Client{Transport: tr, Timeout: callTimeout},
		stream: &http.Client{Transport: tr},
	}, nil
}

// serverFromConsul returns the admin address (host:port) of a healthy instance of
// service (default stickyd-server) from the Consul agent the environment
// names (CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, as the consul CLI does).
func serverFromConsul(service string) (string, error) {
	if service == "" {
		service = "stickyd-server"
	}
	cfg := consulapi.DefaultConfig()
	c, err := consulapi.NewClient(cfg)
	if err != nil {
		return "", fmt.Errorf("consul://%s: %w", service, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	entries, _, err := c.Health().Service(service, "", true, (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("consul://%s: asking Consul at %s: %w", service, cfg.Address, err)
	}
	if len(entries) == 0 {
		return "", fmt.Errorf("consul://%s: Consul at %s has no healthy instance of %q", service, cfg.Address, service)
	}
	e := entries[rand.IntN(len(entries))]
	host := e.Service.Address
	if host == "" {
		host = e.Node.Address
	}
	return net.JoinHostPort(host, strconv.Itoa(e.Service.Port)), nil
}

// apiClient calls the admin API. Close it when done.
type apiClient struct {
	base  *url.URL
	token string
	tr    *http.Transport
	// call bounds a whole call; stream only bounds the dial and the TLS
	// handshake, since a drain answers for as long as its moves take.
	call, stream *http.Client
}

// Close drops the client's idle connections.
func (c *apiClient) Close() { c.tr.CloseIdleConnections() }

// apiError is an answer outside 2xx: the status and the API's message.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return e.Message }

// get calls GET path and returns the answer's body.
func (c *apiClient) get(ctx context.Context, path string) ([]byte, error) {
	return c.do(ctx, http.MethodGet, path, nil, nil)
}

// post calls POST path with body encoded as JSON and returns the answer's
// body.
func (c *apiClient) post(ctx context.Context, path string, body any) ([]byte, error) {
	return c.do(ctx, http.MethodPost, path, nil, body)
}

func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	resp, err := c.send(ctx, c.call, method, path, query, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, c.transportErr(err)
	}
	return b, nil
}

// openStream calls method path and returns the body to read as it comes;
// only ctx (and the dial timeout) bounds it. The caller closes the body.
func (c *apiClient) openStream(ctx context.Context, method, path string, query url.Values) (io.ReadCloser, error) {
	resp, err := c.send(ctx, c.stream, method, path, query, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// send makes the call and turns an answer outside 2xx into an *apiError.
func (c *apiClient) send(ctx context.Context, hc *http.Client, method, path string, query url.Values, body any) (*http.Response, error) {
	// path comes escaped (url.PathEscape on each name in it).
	u := c.base.String() + path
	if q := query.Encode(); q != "" {
		u += "?" + q
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding the request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("building the request: %w", err)
	}
	req.Header.Set("X-Stickyd-Token", c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
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
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return nil, errorFromBody(resp.StatusCode, b)
}

// errorFromBody reads {"error": "..."}; an answer without one (a proxy's
// page, say) is summed up by its status and first line.
func errorFromBody(status int, b []byte) *apiError {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return &apiError{Status: status, Message: e.Error}
	}
	msg := fmt.Sprintf("the admin API answered %d %s", status, http.StatusText(status))
	if line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n"); line != "" {
		if len(line) > 200 {
			line = line[:200] + "..."
		}
		msg += ": " + line
	}
	return &apiError{Status: status, Message: msg}
}

// transportErr says what went wrong below HTTP, naming the address.
func (c *apiClient) transportErr(err error) error {
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

// apiContext is the context of one admin API command: it ends on SIGINT or
// SIGTERM, which abandons the call (a drain stops starting new moves).
func apiContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// parseArgs parses flags wherever they sit among the positional arguments
// (so "user move alice -to web-2" works) and checks that there are want
// positional ones. On bad arguments it prints why and the help, and
// returns false.
func (m *Meta) parseArgs(fs *flag.FlagSet, args []string, want int, help func() string) ([]string, bool) {
	pos, err := interspersed(fs, args)
	if err == nil && len(pos) != want {
		switch {
		case want == 0:
			err = fmt.Errorf("unexpected arguments: %s", strings.Join(pos, " "))
		case len(pos) < want:
			err = fmt.Errorf("missing arguments: want %d, got %d", want, len(pos))
		default:
			err = fmt.Errorf("unexpected arguments: %s", strings.Join(pos[want:], " "))
		}
	}
	if err != nil {
		m.UI.Error(fmt.Sprintf("%v\n\n%s", err, help()))
		return nil, false
	}
	return pos, true
}

// interspersed parses flags among positional arguments and returns the
// positional ones. Everything after "--" is positional.
func interspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// fail prints err and returns the exit code of a failed command.
func (m *Meta) fail(err error) int {
	m.UI.Error(saidOnce(err))
	return 1
}

// saidOnce words err with its context said once: when the command's own
// context ("moving user "x" to demo-9") is the agent's message's only
// wrapping and the agent's message begins by saying the same thing
// ("moving "x" to "demo-9": no such worker": its leading clause's words
// are all among the context's, quotes aside), the agent's message alone;
// otherwise err as it is ("reading the gateway's usage: reading the maps:
// closed" says two things).
func saidOnce(err error) string {
	msg := err.Error()
	var ae *apiError
	if !errors.As(err, &ae) || ae.Message == "" {
		return msg
	}
	ctx, ok := strings.CutSuffix(msg, ": "+ae.Message)
	if !ok || strings.Contains(ctx, ": ") {
		return msg // more said between the two than the context
	}
	theirs, _, ok := strings.Cut(ae.Message, ": ")
	if !ok {
		return msg // the agent's message says no context
	}
	words := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '"' })
	}
	ours := words(ctx)
	said := words(theirs)
	if len(said) == 0 || len(ours) == 0 || said[0] != ours[0] {
		return msg
	}
	for _, w := range said {
		if !slices.Contains(ours, w) {
			return msg
		}
	}
	return ae.Message
}

// printJSON prints an answer as indented JSON, its values untouched.
func (m *Meta) printJSON(b []byte) {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		m.UI.Output(strings.TrimSpace(string(b)))
		return
	}
	m.UI.Output(out.String())
}

// withAPI runs fn with a client of the admin API and the command's context
// (which ends on SIGINT or SIGTERM), and returns fn's exit code; a bad
// -address or a missing token fails first.
func (m *Meta) withAPI(opts *apiOptions, fn func(ctx context.Context, client *apiClient) int) int {
	client, err := opts.client()
	if err != nil {
		return m.fail(err)
	}
	defer client.Close()
	ctx, stop := apiContext()
	defer stop()
	return fn(ctx, client)
}

// badParallel reports (and says) that a -parallel value is out of range.
func (m *Meta) badParallel(n int) bool {
	if n < 1 || n > 256 {
		m.UI.Error(fmt.Sprintf("-parallel=%d: want 1 to 256", n))
		return true
	}
	return false
}
