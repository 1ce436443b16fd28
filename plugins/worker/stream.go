package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// A Site's handler that flushes (http.Flusher, http.ResponseController)
// streams its response: the frame is answered with the status, the
// headers and what was written so far, and the rest of the body waits in
// a stream for the front's reads (HTTPRead frames, answered with HTTPBody),
// which send it on as it comes. From the first flush the handler runs
// outside the person's mailbox and outside the site's pool: the person's
// next requests do not wait for it, and a long stream (server-sent events,
// a big export) holds one goroutine and at most streamBuffer bytes.
const (
	// streamBuffer bounds what a stream holds between two reads: past it
	// the handler's Write waits for the front to read (its client to
	// take the bytes).
	streamBuffer = 1 << 20
	// streamRead bounds what one read answers.
	streamRead = 1 << 20
	// streamIdle is how long a stream waits for a read before it is given
	// up as if its client had left: a front that died does not leave a
	// handler writing forever.
	streamIdle = time.Minute
	// defaultMaxStreams bounds the streams open at once in a worker
	// (SiteOptions.MaxStreams); past it a flush does nothing and the
	// response is sent whole.
	defaultMaxStreams = 1024
)

// errStreamGone is what a stream's Write returns once its client left (or
// the stream was given up, or the worker is stopping): the handler should
// return.
var errStreamGone = errors.New("the client of this streamed response is gone")

// streams are a worker's open streamed responses, by id.
type streams struct {
	max int
	ctx context.Context // the worker's: its end fails every stream's writes

	mu   sync.Mutex // guards next and open
	next uint64
	open map[uint64]*stream
	// warned is set once the bound was logged.
	warned bool
}

func newStreams(ctx context.Context, max int) *streams {
	return &streams{ctx: ctx, max: max, open: map[uint64]*stream{}}
}

// start opens a stream whose handler's context cancel ends, or returns nil
// when max streams are open (the response is then sent whole).
func (ss *streams) start(cancel context.CancelFunc) (*stream, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.open) >= ss.max {
		first := !ss.warned
		ss.warned = true
		return nil, first
	}
	ss.next++
	st := &stream{id: ss.next, set: ss, cancel: cancel, lastRead: time.Now(),
		wake: make(chan struct{}, 1), room: make(chan struct{}, 1)}
	st.idle = time.AfterFunc(streamIdle, st.checkIdle)
	ss.open[st.id] = st
	return st, false
}

func (ss *streams) get(id uint64) *stream {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.open[id]
}

func (ss *streams) drop(st *stream) {
	ss.mu.Lock()
	if ss.open[st.id] == st {
		delete(ss.open, st.id)
	}
	ss.mu.Unlock()
	st.idle.Stop()
}

// count is the number of open streams.
func (ss *streams) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.open)
}

// stream is one streamed response's body between its handler (write, end)
// and the front's reads.
type stream struct {
	id     uint64
	set    *streams
	cancel context.CancelFunc
	idle   *time.Timer

	mu       sync.Mutex // guards the fields below
	buf      []byte     // written, not yet read
	ended    bool       // the handler returned
	failed   string     // why it failed after the headers, if it did
	gone     bool       // canceled: writes fail, reads end
	lastRead time.Time
	// wake is signalled when a write, the end or a cancel lands; room when
	// a read took bytes or the stream was canceled. One slot each: a
	// signal is never lost and never blocks.
	wake, room chan struct{}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// write appends p, waiting for room while streamBuffer bytes are held.
func (st *stream) write(p []byte) (int, error) {
	written := 0
	for {
		st.mu.Lock()
		if st.gone {
			st.mu.Unlock()
			return written, errStreamGone
		}
		if n := min(len(p), streamBuffer-len(st.buf)); n > 0 {
			st.buf = append(st.buf, p[:n]...)
			p, written = p[n:], written+n
			signal(st.wake)
		}
		st.mu.Unlock()
		if len(p) == 0 {
			return written, nil
		}
		select {
		case <-st.room:
		case <-st.set.ctx.Done():
			st.stop()
			return written, errStreamGone
		}
	}
}

// end says the handler returned; failure says why the response could not
// be finished ("" if it was).
func (st *stream) end(failure string) {
	st.mu.Lock()
	st.ended, st.failed = true, failure
	st.mu.Unlock()
	signal(st.wake)
}

// stop cancels the stream: its handler's context ends and its writes
// fail. The stream is forgotten: a read after it is told NOT_FOUND.
func (st *stream) stop() {
	st.mu.Lock()
	st.gone = true
	st.buf = nil
	st.mu.Unlock()
	signal(st.room)
	signal(st.wake)
	st.cancel()
	st.set.drop(st)
}

// read takes what was written since the last read, waiting up to wait for
// some. end says the stream is over; the stream is then forgotten.
func (st *stream) read(ctx context.Context, wait time.Duration) (data []byte, end bool, failed string) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		st.mu.Lock()
		st.lastRead = time.Now()
		if len(st.buf) > 0 || st.ended || st.gone {
			n := min(len(st.buf), streamRead)
			data = append([]byte(nil), st.buf[:n]...)
			st.buf = st.buf[n:]
			if len(st.buf) == 0 {
				st.buf = nil
			}
			end = st.gone || (st.ended && len(st.buf) == 0)
			failed = st.failed
			st.mu.Unlock()
			signal(st.room)
			if end {
				st.set.drop(st)
			}
			return data, end, failed
		}
		st.mu.Unlock()
		select {
		case <-st.wake:
		case <-timer.C:
			return nil, false, ""
		case <-ctx.Done():
			return nil, false, ""
		}
	}
}

// checkIdle gives the stream up when nobody read it for streamIdle.
func (st *stream) checkIdle() {
	st.mu.Lock()
	left := streamIdle - time.Since(st.lastRead)
	st.mu.Unlock()
	if left > 0 {
		st.idle.Reset(left)
		return
	}
	st.stop()
}

// readStream answers an HTTPRead frame.
func (rt *runtime) readStream(id uint64, rd *protocol.HTTPRead) {
	var st *stream
	if rt.streams != nil {
		st = rt.streams.get(rd.Stream)
	}
	if st == nil {
		_ = rt.peer.ReplyError(id, protocol.Error_NOT_FOUND, fmt.Sprintf("no stream %d on this worker: it ended, or nobody read it for %v", rd.Stream, streamIdle))
		return
	}
	var body *protocol.HTTPBody
	if rd.Cancel {
		st.stop()
		body = &protocol.HTTPBody{End: true}
	} else {
		data, end, failed := st.read(rt.ctx, time.Duration(rd.WaitMs)*time.Millisecond)
		body = &protocol.HTTPBody{Data: data, End: end, Error: failed}
	}
	_ = rt.peer.Reply(id, &protocol.Envelope{Body: &protocol.Envelope_FrameReply{FrameReply: &protocol.FrameReply{
		Kind: &protocol.FrameReply_Body{Body: body}, WorkerId: rt.workerID}}})
}
