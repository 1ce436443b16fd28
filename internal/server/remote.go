package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/plugins/worker/channel"
)

// Remote calls the admin APIs of the other agents (servers and hosts),
// with this agent's token, through the one client of the admin API
// (internal/api/client): one client per address, over one transport (with
// the agents' mutual TLS when tls.https is on).
type Remote struct {
	token string
	https bool
	tr    *http.Transport

	mu      sync.Mutex // guards clients
	clients map[string]*client.Client
}

// remoteTimeout bounds a call to another agent that is not a stream.
const remoteTimeout = 30 * time.Second

// NewRemote is the caller of the other agents' APIs: token is the admin
// token they share; tr the transport (its TLS when https).
func NewRemote(token string, https bool, tr *http.Transport) *Remote {
	return &Remote{token: token, https: https, tr: tr, clients: map[string]*client.Client{}}
}

// URL is the base URL of the admin API at addr ("host:port", or a URL).
func (r *Remote) URL(addr string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	if r.https {
		return "https://" + addr
	}
	return "http://" + addr
}

// clientOf is the client of the admin API at addr.
func (r *Remote) clientOf(addr string) (*client.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clients[addr]; ok {
		return c, nil
	}
	c, err := client.New(client.Config{Address: r.URL(addr), Token: r.token, Transport: r.tr,
		Timeout: remoteTimeout, MaxAnswerBytes: channel.MaxEnvelopeBytes})
	if err != nil {
		return nil, err
	}
	if len(r.clients) >= 1024 {
		clear(r.clients) // addresses of agents long gone
	}
	r.clients[addr] = c
	return c, nil
}

// Call calls method path on the agent at addr with body as it is, and
// decodes its JSON answer into out (when not nil).
func (r *Remote) Call(ctx context.Context, method, addr, path string, body []byte, out any) error {
	b, err := r.Fetch(ctx, method, addr, path, body)
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// Fetch calls method path on the agent at addr and returns the answer's
// bytes; a refusal (an answer outside 2xx) is a *Refusal carrying the
// agent's message and, where it names one, the maps' sentinel error.
func (r *Remote) Fetch(ctx context.Context, method, addr, path string, body []byte) ([]byte, error) {
	c, err := r.clientOf(addr)
	if err != nil {
		return nil, err
	}
	b, err := c.Raw(ctx, method, path, body)
	var ce *client.Error
	if errors.As(err, &ce) {
		return nil, &Refusal{Status: ce.Status, Err: fsm.KindError(ce.Kind, ce.Message)}
	}
	return b, err
}

// AdminRequest is a request to the admin API of the agent at addr with
// this agent's token, to send with StreamClient: an answer that streams.
func (r *Remote) AdminRequest(ctx context.Context, method, addr, path string, body io.Reader) (*http.Request, error) {
	c, err := r.clientOf(addr)
	if err != nil {
		return nil, err
	}
	return c.NewRequest(ctx, method, path, body)
}

// StreamClient sends AdminRequests with no timeout but their context's.
func (r *Remote) StreamClient() *http.Client { return &http.Client{Transport: r.tr} }

// Refusal is another agent's refusal of an admin call: the HTTP status it
// answered with, and its message as the error's.
type Refusal struct {
	Status int
	Err    error
}

func (e *Refusal) Error() string   { return e.Err.Error() }
func (e *Refusal) Unwrap() error   { return e.Err }
func (e *Refusal) StatusCode() int { return e.Status }
