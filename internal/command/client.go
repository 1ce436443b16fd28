package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/stickyd/stickyd/internal/api/client"
)

// Where the admin API is, and how long finding it through Consul may take.
const (
	// DefaultAddress is the admin API address when neither -address nor
	// $STICKYD_ADDR gives one (the agent's default admin.address).
	DefaultAddress = "http://127.0.0.1:4650"

	// consulTimeout bounds asking Consul for a server (consul://).
	consulTimeout = 5 * time.Second
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

// client checks the options and returns a client of the admin API
// (internal/api/client, the CLI's only road to the API), its errors said in
// the flags' words. It fails, without calling anything, when there is no
// token or the address is not a URL.
func (o *apiOptions) client() (*client.Client, error) {
	if o.token == "" {
		return nil, errNoToken
	}
	addr := strings.TrimSpace(o.address)
	if service, ok := strings.CutPrefix(addr, "consul://"); ok {
		// Without a scheme, the client takes https when there is a CA.
		var err error
		if addr, err = serverFromConsul(strings.TrimRight(service, "/")); err != nil {
			return nil, err
		}
	}
	c, err := client.New(client.Config{Address: addr, Token: o.token, CAFile: o.caFile, TLSServerName: o.serverName})
	var pe *fs.PathError
	switch {
	case errors.Is(err, client.ErrBadAddress):
		return nil, fmt.Errorf("bad -address %q: want http://HOST:PORT", o.address)
	case errors.Is(err, client.ErrNoPEM):
		return nil, fmt.Errorf("-ca-file %s holds no PEM certificate", o.caFile)
	case errors.As(err, &pe):
		return nil, fmt.Errorf("reading -ca-file: %w", pe)
	}
	return c, err
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
	ctx, cancel := context.WithTimeout(context.Background(), consulTimeout)
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
	var ae *client.Error
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

// answered reports whether err is nil or only says that the answer did not
// decode: -json prints the API's answer as it came (client.KeepBody)
// without reading it, and a command that shows nothing of an answer does
// not need it to decode.
func answered(err error) bool {
	var de *client.DecodeError
	return err == nil || errors.As(err, &de)
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
func (m *Meta) withAPI(opts *apiOptions, fn func(ctx context.Context, api *client.Client) int) int {
	api, err := opts.client()
	if err != nil {
		return m.fail(err)
	}
	defer api.Close()
	ctx, stop := apiContext()
	defer stop()
	return fn(ctx, api)
}

// badParallel reports (and says) that a -parallel value is out of range.
func (m *Meta) badParallel(n int) bool {
	if n < 1 || n > 256 {
		m.UI.Error(fmt.Sprintf("-parallel=%d: want 1 to 256", n))
		return true
	}
	return false
}
