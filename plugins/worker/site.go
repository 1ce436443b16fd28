package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/stickyd/stickyd/plugins/worker/channel"
)

// Site mounts an existing net/http site as a stickyd App, unchanged: every
// request of the site's routes is served by h, with the person's Session in
// its context (SessionFrom(r.Context())), so the site keeps per-person state
// in Session.Values, which moves with the person.
//
// The requests run on a pool of goroutines of their own (SiteOptions.Workers
// per worker), never on the goroutine that reads the channel: a burst of slow
// requests fills the pool and its queue, and past the queue the requests are
// refused (HTTP 503 with Retry-After), while the worker's service operations
// (probes, table changes, freezes and wakes of other people) go on at once.
// Each person's requests still run one at a time, in arrival order: the
// person's mailbox hands a request to the pool and waits for it. While it
// waits, the handler is the person's mailbox: it may use the Session (and
// its Values tree) without locks, and a freeze of the person (a move) waits
// for the request to finish, bounded by the move's freeze timeout. A freeze
// puts the person's waiting requests ahead of the pool's queue, so it waits
// for a free goroutine of the pool, never for the whole queue.
//
// The response is buffered and sent whole when the handler returns, unless
// the handler flushes (http.Flusher, http.ResponseController): the
// response then streams. The status, the headers and what was written so
// far reach the browser at once, and each later write as it comes
// (chunked responses, server-sent events, big exports), for as long as the
// handler writes. From its first flush the handler is no longer the
// person's mailbox: their next requests run meanwhile, a move does not
// wait for it, and it must not use the Session (whose state may have
// moved); its context ends when the client leaves. A stream's writes wait
// while 1 MiB is not yet read by the client; SiteOptions.MaxStreams bounds
// the streams open at once.
//
// Pages: a site has a minimal page model. A page opens with an empty tree
// (by convention of kind "site"), and a message is refused with "this app
// serves HTTP only" unless SiteOptions.Message handles it.
func Site(h http.Handler, opts SiteOptions) App {
	return &site{h: h, opts: opts.withDefaults()}
}

// SitePageKind is the kind of a site's pages by convention.
const SitePageKind = "site"

// SiteOptions tune a Site. Zero values take the defaults noted.
type SiteOptions struct {
	// Workers is the number of goroutines serving the site's requests in
	// each worker; default 16.
	Workers int
	// QueueMax is how many requests may wait for the pool; past it a request
	// is refused at once with HTTP 503 and Retry-After. Default 1024.
	QueueMax int
	// MaxBodyBytes bounds a response body, which is buffered whole: a
	// handler's Write past it fails with ErrBodyTooLarge and the request is
	// answered 500. Default 64 MiB; it is lowered to fit in one channel
	// envelope. Request bodies are bounded by the front (max_body_bytes,
	// 10 MiB by default).
	MaxBodyBytes int64
	// MaxStreams bounds the streamed responses open at once in a worker;
	// past it a handler's flush does nothing and its response is sent
	// whole. Default 1024.
	MaxStreams int
	// Needs declares which backends the site's routes need
	// (docs/maintenance.md); nil means none.
	Needs *Needs
	// Message, if set, handles the messages of the site's pages; without
	// it they are refused.
	Message func(ctx context.Context, p *Page, msg json.RawMessage) (any, error)
}

const (
	defaultSiteWorkers  = 16
	defaultSiteQueueMax = 1024
	defaultSiteMaxBody  = 64 << 20
	// maxSiteBody keeps a response, with its headers, inside one envelope.
	maxSiteBody = channel.MaxEnvelopeBytes - 1<<20
)

func (o SiteOptions) withDefaults() SiteOptions {
	if o.Workers <= 0 {
		o.Workers = defaultSiteWorkers
	}
	if o.QueueMax <= 0 {
		o.QueueMax = defaultSiteQueueMax
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = defaultSiteMaxBody
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = defaultMaxStreams
	}
	if o.MaxBodyBytes > maxSiteBody {
		o.MaxBodyBytes = maxSiteBody
	}
	return o
}

// ErrHTTPOnly answers the messages of a site's pages when the site has no
// SiteOptions.Message.
var ErrHTTPOnly = errors.New("this app serves HTTP only")

// site is the App Site returns. The runtime recognises it (pooled) and
// runs its requests on a sitePool.
type site struct {
	h    http.Handler
	opts SiteOptions
}

var (
	_ App       = (*site)(nil)
	_ Dependent = (*site)(nil)
	_ pooled    = (*site)(nil)
)

// pooled is an App whose HTTP requests run on a pool of their own.
type pooled interface {
	siteOptions() SiteOptions
}

func (s *site) siteOptions() SiteOptions { return s.opts }

// ServeHTTP forwards to the site's handler. The runtime calls it on the
// site's pool; outside a worker (a test with NewTestContext) it is a plain
// call.
func (s *site) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.ServeHTTP(w, r) }

// OpenPage leaves the page's tree empty.
func (s *site) OpenPage(context.Context, *Page) error { return nil }

// Message hands the message to SiteOptions.Message, or refuses it.
func (s *site) Message(ctx context.Context, p *Page, msg json.RawMessage) (any, error) {
	if s.opts.Message == nil {
		return nil, ErrHTTPOnly
	}
	return s.opts.Message(ctx, p, msg)
}

// Needs implements Dependent.
func (s *site) Needs() *Needs { return s.opts.Needs }
