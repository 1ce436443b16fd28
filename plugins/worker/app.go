// Package worker is the public SDK for stickyd applications. An application
// implements App and calls Serve from its main; stickyd runs the binary as a
// worker process and routes every message of a person to it.
//
// Inside a worker, live state is nested as the product describes it: a user
// owns connections (Session), a connection owns pages (Page), and each page
// owns a Tree of JSON-like data. Writes to a Tree become deltas that the page
// pulls; nothing is pushed, and a silent page's deltas wait in its collector.
//
// All state of one user is touched only from that user's mailbox, one frame
// at a time, so an App needs no locks for it. The SDK never listens on the
// network: it talks to its host only on its channel. It knows nothing of the
// supervisor.
package worker

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// App is what an application implements.
type App interface {
	// ServeHTTP serves the site's own routes (pages, assets, forms, login).
	// SessionFrom(r.Context()) is the connection the request belongs to.
	http.Handler

	// OpenPage is called when a page (a browser tab) opens, or restarts
	// clean, with an empty tree to fill.
	OpenPage(ctx context.Context, p *Page) error

	// Message handles one message from a page. Writes to p.Tree() become
	// deltas for the page; the returned value (JSON-encodable) is the answer
	// to this message. An error is shown to the page as a refusal: a
	// *Refusal says its code and whether it may succeed later.
	//
	// A message whose answer was lost with the connection is reported to the
	// page as retryable, and the page decides whether to send it again: ops
	// that a page resends should be safe to repeat.
	Message(ctx context.Context, p *Page, msg json.RawMessage) (any, error)
}

// PageCloser is an optional App ability: ClosePage is called when a page
// closes for good.
type PageCloser interface {
	ClosePage(ctx context.Context, p *Page)
}

// Schemas is an optional App ability: it declares, per page kind, the
// version of the page's state schema and the oldest version this build still
// reads. When a person moves between builds, a page whose kind is unknown
// here, or whose version is outside [oldest, version], is not guessed at: it
// restarts clean and the page is told why. Additive changes (a new field, a
// missing field) need no new version. Without Schemas every kind is version
// 0 and every page moves as it is.
type Schemas interface {
	Schema(kind string) (version, oldest uint32, known bool)
}

// Engine is an optional App ability: the App's read-only engine, the
// reference data, indexes and compiled tables that every person's pages read
// and nobody writes. BuildEngine builds it and returns its frozen image, a
// flat byte layout the App defines (offsets, not pointers). LoadEngine starts
// the App from an image before the worker serves its first frame.
//
// With a template (TemplateDirEnv names a directory for the group's
// workers; see docs/templates.md) the image is built once per build of the
// worker and written to a file; every worker of the group then maps that
// file read-only and shares its pages. Without one, each worker builds its
// own image, and it is read-only memory all the same.
//
// The contract:
//   - BuildEngine must be deterministic in what it means: any worker of the
//     same build may load an image another one built.
//   - The image LoadEngine gets starts at an address aligned to 8 bytes and
//     is read-only: the App reads it in place (unsafe.Slice views over it)
//     and must never write to it. A write faults and kills the worker.
//   - LoadEngine is called once per App value while any worker of this
//     process serves it: in-process workers that share an App share its
//     engine. When the last of them ends, the image is unmapped; LoadEngine
//     is called again before that App serves again, and the App must not
//     read the old image outside a worker.
//   - A BuildEngine or LoadEngine error stops the worker's start.
type Engine interface {
	BuildEngine(ctx context.Context) ([]byte, error)
	LoadEngine(image []byte) error
}

// Options describe the application to its host.
type Options struct {
	// Name and Version identify the build in the host's logs and monitor.
	Name    string
	Version string
	// Logger receives the SDK's logs. nil means stderr: JSON lines under
	// Serve, which the host's go-plugin client logs; text lines under
	// InProcess, in the host's own format.
	Logger hclog.Logger
	// MaxPagesPerConn and MaxPagesPerPerson bound the pages open at once
	// on one connection (a browser: all its tabs) and for one person (all
	// their connections); an open past either is refused with a message the
	// page sees, until one is closed. Defaults DefaultMaxPagesPerConn and
	// DefaultMaxPagesPerPerson; negative is no bound.
	MaxPagesPerConn   int
	MaxPagesPerPerson int
	// MaxPageBytes and MaxPersonBytes bound a page's state and the sum of
	// a person's pages here, in bytes as the tree codec writes them: a
	// write that would go past either fails with ErrStateTooLarge (the
	// handler's error is what the page sees), and the worker counts it
	// (stickyd_worker_state_refused_total). Defaults DefaultMaxPageBytes
	// and DefaultMaxPersonBytes; negative is no bound.
	MaxPageBytes   int64
	MaxPersonBytes int64
}

// The default page bounds.
const (
	DefaultMaxPagesPerConn   = 100
	DefaultMaxPagesPerPerson = 500
	DefaultMaxPageBytes      = 256 << 20
	DefaultMaxPersonBytes    = 1 << 30
)

// withLimits is o with the group's limits (the operator's) over the
// application's own where they are set.
func (o Options) withLimits(l *protocol.WorkerLimits) Options {
	if l == nil {
		return o
	}
	if l.MaxPageBytes != 0 {
		o.MaxPageBytes = l.MaxPageBytes
	}
	if l.MaxPersonBytes != 0 {
		o.MaxPersonBytes = l.MaxPersonBytes
	}
	if l.MaxPagesPerConn != 0 {
		o.MaxPagesPerConn = int(l.MaxPagesPerConn)
	}
	if l.MaxPagesPerPerson != 0 {
		o.MaxPagesPerPerson = int(l.MaxPagesPerPerson)
	}
	return o
}

// stateBounds are o's state bounds, 0 for none.
func (o Options) stateBounds() (perPage, perPerson int64) {
	return bound(o.MaxPageBytes, DefaultMaxPageBytes), bound(o.MaxPersonBytes, DefaultMaxPersonBytes)
}

// pageBounds are o's page bounds, 0 for none.
func (o Options) pageBounds() (perConn, perPerson int) {
	return bound(o.MaxPagesPerConn, DefaultMaxPagesPerConn), bound(o.MaxPagesPerPerson, DefaultMaxPagesPerPerson)
}

// bound reads an Options bound: zero is the default, negative none (0).
func bound[T int | int64](v, def T) T {
	switch {
	case v < 0:
		return 0
	case v == 0:
		return def
	}
	return v
}

func (o Options) logger() hclog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return hclog.New(&hclog.LoggerOptions{Name: "worker", Level: hclog.Info, JSONFormat: true})
}
