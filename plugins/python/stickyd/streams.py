"""Streamed site responses: the rest of a WSGI body whose frame was
answered before the body ended (HTTPResponse.stream), held until the front
reads it with HTTPRead frames, each answered by an HTTPBody
(internal/protocol/stickyd.proto).

The thread that runs the body is the stream's producer: it writes each
block into the stream's buffer and blocks while the buffer is full, until a
read drains it (backpressure) or the stream is dropped. A read takes what
is buffered, at once if there is some or the body ended, else it waits
without a thread (the producer or a Scheduler timer answers it). Nothing
lives forever: a stream is forgotten once its end is read, when the client
leaves (a read with cancel), and when nobody read it for STREAM_IDLE; a
dropped stream's producer stops at its next block.
"""

import threading
import time

from . import stickyd_pb2 as pb

# MAX_BUFFERED bounds what a stream holds unread (bytes): past it the
# producer waits for a read.
MAX_BUFFERED = 1 << 20
# MAX_READ bounds one read's answer (bytes); the rest stays for the next.
MAX_READ = 1 << 20
# MAX_READ_WAIT bounds how long a read waits for body (seconds).
MAX_READ_WAIT = 60.0
# STREAM_IDLE: a stream nobody read for this long is dropped as if its
# client had left (seconds; read when a stream starts, so tests may lower it).
STREAM_IDLE = 60.0


class Streams:
    """A worker's streams by id, with at most limit producers at once (each
    holds one of the app's threads)."""

    def __init__(self, sched, log, limit):
        self.sched = sched
        self.log = log
        self._limit = limit
        self._mu = threading.Lock()  # guards everything below
        self._by_id = {}
        self._last = 0
        self._producing = 0
        self._warned = False

    def open(self):
        """A new stream, or None when limit streams are producing: the
        response is then sent whole (logged the first time)."""
        with self._mu:
            if self._producing < self._limit:
                self._producing += 1
                self._last += 1
                st = self._by_id[self._last] = Stream(self, self._last)
                return st
            warn, self._warned = not self._warned, True
        if warn:
            self.log.warn("streamed responses at their bound: slow bodies are sent whole (logged once)",
                          max_streams=self._limit)
        return None

    def read(self, id, wait, cancel, reply):
        """Answers an HTTPRead of stream id with reply(HTTPBody), now or
        within wait seconds; False when the stream is not here."""
        with self._mu:
            st = self._by_id.get(id)
        if st is None:
            return False
        st.read(min(wait, MAX_READ_WAIT), cancel, reply)
        return True

    def close(self):
        """Drops every stream: their producers stop (the worker stops)."""
        with self._mu:
            held = list(self._by_id.values())
        for st in held:
            st.cancel()

    def _produced(self):
        with self._mu:
            self._producing -= 1

    def _forget(self, st):
        with self._mu:
            if self._by_id.get(st.id) is st:
                del self._by_id[st.id]


class _Read:
    __slots__ = ("reply", "timer")

    def __init__(self, reply):
        self.reply = reply
        self.timer = None


class Stream:
    """One streamed body: written by its producer, read by the front."""

    def __init__(self, streams, id):
        self.id = id
        self._streams = streams
        self._cv = threading.Condition()  # guards everything below
        self._buf = bytearray()
        self._ended = False  # the producer is done: the buffer is the rest
        self._error = ""  # why the body failed, once ended
        self._dropped = False  # the client left (or nobody read): no more body
        self._gone = False  # forgotten: reads of it are NOT_FOUND
        self._waiter = None  # the read waiting for body
        self._read_at = time.monotonic()
        with self._cv:
            self._idle = streams.sched.after(STREAM_IDLE, self._check_idle)

    # -- the producer ---------------------------------------------------------

    def write(self, data):
        """Adds a block of the body, waiting while the buffer is full;
        False once the stream is dropped (the producer stops)."""
        view = memoryview(data)
        while view:
            with self._cv:
                while not self._dropped and len(self._buf) >= MAX_BUFFERED:
                    self._cv.wait()
                if self._dropped:
                    return False
                n = MAX_BUFFERED - len(self._buf)
                self._buf += view[:n]
                view = view[n:]
                ready = self._wake_locked()
            _answer(ready)
        return True

    def finish(self, error="", tb=""):
        """Ends the body (error: the iterable raised after the stream
        began); called once, by the producer, after the iterable's close()."""
        if error:
            self._streams.log.error("app raised", stream=self.id, error=error, traceback=tb)
        with self._cv:
            self._ended, self._error = True, error
            ready = self._wake_locked()
        self._streams._produced()
        _answer(ready)

    # -- the reader -----------------------------------------------------------

    def read(self, wait, cancel, reply):
        with self._cv:
            self._read_at = time.monotonic()
            if cancel:
                ready = [(reply, pb.HTTPBody(end=True))] + self._drop_locked()
            elif self._buf or self._ended or self._dropped or wait <= 0:
                ready = [(reply, self._take_locked())]
            else:
                # One read waits at a time. A second one means the front
                # gave the first up (its answer would be lost): the first is
                # answered with nothing and the second waits instead.
                ready = self._unwait_locked()
                w = self._waiter = _Read(reply)
                w.timer = self._streams.sched.after(wait, lambda: self._expire(w))
        _answer(ready)

    def cancel(self):
        """Drops the stream: the client is gone, or its frame could not be
        answered."""
        with self._cv:
            ready = self._drop_locked()
        _answer(ready)

    def _expire(self, w):
        with self._cv:
            if self._waiter is not w:
                return
            self._waiter = None
            self._read_at = time.monotonic()
            ready = [(w.reply, self._take_locked())]
        _answer(ready)

    def _check_idle(self):
        """STREAM_IDLE after the last read: drops a stream nobody reads
        (its producer may be waiting for room that never comes)."""
        with self._cv:
            if self._gone:
                return
            left = STREAM_IDLE if self._waiter else self._read_at + STREAM_IDLE - time.monotonic()
            if left > 0:
                self._idle = self._streams.sched.after(left, self._check_idle)
                return
            self._drop_locked()
        self._streams.log.warn("a streamed response nobody read was canceled", stream=self.id,
                               idle_seconds=STREAM_IDLE)

    # -- under _cv ------------------------------------------------------------

    def _take_locked(self):
        """What a read answers: up to MAX_READ of the buffer; end once the
        rest is read (the stream is then forgotten) or it was dropped."""
        n = min(len(self._buf), MAX_READ)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        self._cv.notify_all()  # room for the producer
        end = self._dropped or (self._ended and not self._buf)
        if end:
            self._forget_locked()
        return pb.HTTPBody(data=data, end=end, error=self._error if end and not self._dropped else "")

    def _wake_locked(self):
        """The waiting read's answer, now that there is body or an end."""
        w = self._waiter
        if w is None or not (self._buf or self._ended or self._dropped):
            return []
        self._waiter = None
        w.timer.cancel()
        self._read_at = time.monotonic()
        return [(w.reply, self._take_locked())]

    def _unwait_locked(self):
        w, self._waiter = self._waiter, None
        if w is None:
            return []
        w.timer.cancel()
        return [(w.reply, self._take_locked())]

    def _drop_locked(self):
        self._dropped = True
        self._buf = bytearray()
        self._cv.notify_all()  # a producer waiting for room stops
        ready = self._unwait_locked()
        self._forget_locked()
        return ready

    def _forget_locked(self):
        if not self._gone:
            self._gone = True
            self._idle.cancel()
            self._streams._forget(self)


def _answer(ready):
    for reply, body in ready:
        reply(body)
