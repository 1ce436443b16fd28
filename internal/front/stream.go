package front

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// streamReadWait is how long one read of a streamed response waits in the
// worker for more body: an SSE stream that says nothing costs one round
// trip per streamReadWait.
const streamReadWait = 15 * time.Second

// streamBody sends the rest of a streamed response (resp.Stream != 0): the
// status, headers and first body were written; each read the worker
// answers is written and flushed at once, until the stream ends. A
// frame_timeout bounds each read's round trip past its wait, not the
// response: a stream runs as long as its handler writes. A client that
// leaves, a write it does not take within the front's write timeout, or the
// front's stop cancels the stream in the worker and cuts the response (the
// status is sent: the client sees a body that stops without its end).
func (f *Front) streamBody(ctx context.Context, w http.ResponseWriter, worker string, stream uint64) error {
	f.streams.Add(1)
	defer f.streams.Add(-1)
	how, err := f.sendStream(ctx, w, worker, stream)
	if how == streamClientLeft && f.root.Err() != nil {
		how = streamStopping
	}
	f.streamsEnded.WithLabelValues(how).Inc()
	return err
}

// How a streamed response ended (stickyd_front_site_streams_ended_total).
const (
	streamWhole         = "whole"
	streamClientLeft    = "client_left"
	streamWorker        = "worker"
	streamHandlerFailed = "handler_failed"
	streamStopping      = "stopping"
)

func (f *Front) sendStream(ctx context.Context, w http.ResponseWriter, worker string, stream uint64) (string, error) {
	rc := http.NewResponseController(w)
	flush := func() error {
		_ = rc.SetWriteDeadline(time.Now().Add(f.cfg.WriteTimeout))
		return rc.Flush()
	}
	if err := flush(); err != nil {
		f.cancelStream(worker, stream)
		return streamClientLeft, errStreamCut
	}
	read := &protocol.Frame{Kind: &protocol.Frame_Read{Read: &protocol.HTTPRead{Stream: stream, WaitMs: uint32(streamReadWait / time.Millisecond)}}}
	for {
		rep, err := f.call(ctx, worker, read, streamReadWait+f.cfg.FrameTimeout)
		if err != nil {
			f.cancelStream(worker, stream)
			if ctx.Err() != nil {
				return streamClientLeft, errStreamCut
			}
			f.log.Warn("a streamed response was cut: its worker did not answer a read", "worker", worker, "stream", stream, "error", err)
			return streamWorker, errStreamCut
		}
		b := rep.GetBody()
		if b == nil {
			f.cancelStream(worker, stream)
			f.log.Warn("a streamed response was cut: its worker answered a read without a body", "worker", worker, "stream", stream)
			return streamWorker, errStreamCut
		}
		if len(b.Data) > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(f.cfg.WriteTimeout))
			if _, err := w.Write(b.Data); err != nil {
				if !b.End {
					f.cancelStream(worker, stream)
				}
				return streamClientLeft, errStreamCut
			}
			if err := flush(); err != nil && !b.End {
				f.cancelStream(worker, stream)
				return streamClientLeft, errStreamCut
			}
		}
		if b.End {
			if b.Error != "" {
				f.log.Warn("a streamed response was cut: its handler failed after the headers", "worker", worker, "stream", stream, "error", b.Error)
				return streamHandlerFailed, errStreamCut
			}
			return streamWhole, nil
		}
	}
}

// errStreamCut ends a streamed response that cannot end cleanly: the status
// was sent, so no error can be written; the connection is cut instead.
var errStreamCut = errors.New("the streamed response was cut")

// cancelStream tells the worker a stream's client is gone, so its handler
// stops (its context ends, the iterable is closed). Best effort, bounded:
// a stream nobody reads is given up by the worker on its own.
func (f *Front) cancelStream(worker string, stream uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.FrameTimeout)
	defer cancel()
	read := &protocol.Frame{Kind: &protocol.Frame_Read{Read: &protocol.HTTPRead{Stream: stream, Cancel: true}}}
	if _, err := f.call(ctx, worker, read, f.cfg.FrameTimeout); err != nil && !isNotFound(err) {
		f.log.Debug("canceling a streamed response", "worker", worker, "stream", stream, "error", err)
	}
}

// isNotFound says whether the worker answered NOT_FOUND: it no longer has
// the stream (it ended, or was given up).
func isNotFound(err error) bool {
	var re *channel.RemoteError
	return errors.As(err, &re) && re.Code == protocol.Error_NOT_FOUND
}
