package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Serve runs app as a stickyd worker plugin. It is the whole of an
// application's main; it returns only when the host stops the worker. Run by
// hand (not by a stickyd host), it explains itself and exits with 1.
func Serve(app App, opts Options) {
	log := opts.logger()
	opts.Logger = log
	prepareEngine(app)
	err := channel.ServePlugin(func(ctx context.Context, c channel.Conn) error {
		err := ServeConn(ctx, app, opts, c)
		if err != nil {
			log.Error("worker channel ended", "error", err)
		}
		// One channel per process: when the host is done with it, so
		// is the worker.
		go func() { os.Exit(0) }()
		return err
	}, log)
	switch {
	case errors.Is(err, channel.ErrNoHost):
		name := cmp.Or(opts.Name, "app")
		fmt.Fprintf(os.Stderr, "This is the stickyd worker of %s: a stickyd agent starts it, for a group whose command\n"+
			"(or bundle) it is, or `stickyd dev -plugin %s` while developing (docs/sdk.md).\n"+
			"It is not meant to be run by hand.\n", name, os.Args[0])
		os.Exit(1)
	case err != nil:
		log.Error("serving the host", "error", err)
		os.Exit(1)
	}
}

// InProcess returns a function that serves app on one end of an in-memory
// channel: the form stickyd takes for an application compiled into it
// (stickyd dev, tests).
func InProcess(app App, opts Options) func(context.Context, channel.Conn) error {
	if opts.Logger == nil {
		// In the host's process: the host's text format on its stderr,
		// not the JSON lines a plugin writes for go-plugin to relay.
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "worker", Level: hclog.Info, Output: os.Stderr})
	}
	return func(ctx context.Context, c channel.Conn) error { return ServeConn(ctx, app, opts, c) }
}

// channelEnv set to "grpc" keeps a subprocess worker's envelopes on the
// plugin's gRPC stream instead of the framed channel.
const channelEnv = "STICKYD_WORKER_CHANNEL"

// ServeConn runs app on an open channel until the channel closes or ctx ends.
// Serve uses it for the plugin's gRPC channel; stickyd dev uses it for an
// in-process worker on an in-memory channel.
func ServeConn(ctx context.Context, app App, opts Options, c channel.Conn) error {
	hello := &protocol.Hello{ProtocolVersion: protocol.Version, App: opts.Name, AppVersion: opts.Version, Pid: int64(os.Getpid()),
		Checkpoints: true, PackageChunks: true, Batches: true}
	return serveConn(ctx, app, opts, c, hello)
}

func serveConn(ctx context.Context, app App, opts Options, c channel.Conn, hello *protocol.Hello) error {
	// The engine is loaded before the hello: the host counts the worker as
	// started, and sends it frames, only once it can serve them.
	releaseEngine, err := startEngine(ctx, app, opts, opts.logger())
	if err != nil {
		c.Close()
		return fmt.Errorf("starting the engine: %w", err)
	}
	defer releaseEngine()
	// A subprocess offers the host the framed channel (a Unix socket of
	// its own; docs/protocol.md), unless STICKYD_WORKER_CHANNEL=grpc keeps
	// every envelope on the plugin's gRPC stream.
	var offer *channel.FramedOffer
	if _, ok := c.(*channel.GRPCConn); ok && os.Getenv(channelEnv) != "grpc" {
		if offer, err = channel.OfferFramed(hello); err != nil {
			opts.logger().Warn("the framed channel is not offered; envelopes go on the gRPC stream", "error", err)
			offer = nil
		}
	}
	ack, err := channel.Greet(ctx, c, hello)
	if err != nil {
		if offer != nil {
			offer.Close()
		}
		c.Close()
		return fmt.Errorf("greeting the host: %w", err)
	}
	if offer != nil {
		fc, err := offer.Take(ctx, ack)
		if err != nil {
			c.Close()
			return err
		}
		if fc != nil {
			c = channel.Paired(fc, c)
		}
	}
	opts = opts.withLimits(ack.GetLimits())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rt := &runtime{
		app:      app,
		opts:     opts,
		log:      opts.logger().With("worker", ack.WorkerId),
		workerID: ack.WorkerId,
		ctx:      ctx,
		users:    map[string]*user{},
		conns:    map[string]*Session{},
		byUser:   map[string]map[*Session]struct{}{},
		epochs:   map[string]uint64{},
		frozen:   map[string]bool{},
		yields:   map[string]*yielding{},
		maint:    newMaintenance(),
		freed:    make(chan struct{}, 1),
		maxBody:  maxSiteBody,
		runq:     make(chan *user),
	}
	if d, ok := app.(Dependent); ok {
		rt.needs = d.Needs()
	}
	if p, ok := app.(pooled); ok {
		o := p.siteOptions()
		rt.site, rt.maxBody = newSitePool(o.Workers, o.QueueMax), o.MaxBodyBytes
		rt.streams = newStreams(ctx, o.MaxStreams)
	}
	go rt.releaser(ctx)
	rt.peer = channel.NewIdlePeer(c, rt.handle)
	if ack.PackageChunks {
		rt.peer.EnableChunks()
	}
	if ack.Batches {
		rt.peer.EnableBatches()
	}
	rt.peer.Listen()
	select {
	case <-rt.peer.Done():
	case <-ctx.Done():
		rt.peer.Close()
	}
	cancel()
	if rt.site != nil {
		// Before the mailboxes: those waiting for the pool are let go.
		rt.site.close()
	}
	rt.wg.Wait()
	return nil
}
