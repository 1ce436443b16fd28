"""The AI gateway (docs/gateway.md) as a Python app sees it: the Go SDK's
Gateway (plugins/worker/gateway.go), with the same envelopes on the channel
and the same JSON.

A call goes to the host on the worker's channel (GatewayCall) and runs on
the cluster's gateway, with its limits, failover and accounting; its cost is
charged to the person whose connection asked (their user key as of this
frame: a login takes effect from the connection's next frame; an anonymous
connection's own key before). The host needs a gateway block, else every
call is refused (GatewayError, kind "", "this agent has no gateway block").

    gw = page.gateway()                      # or stickyd.session().gateway()
    r = gw.complete(stickyd.GatewayRequest("small", [stickyd.GatewayMessage("user", "hi")]))
    r.content, r.cost_micros
    with gw.stream({"model": "small", "messages": [{"role": "user", "content": "hi"}]}) as st:
        for c in st:                         # GatewayChunk: .delta, .done, .usage...
            page.tree.set("answer", page.tree.get("answer", "") + c.delta)

A call made from a handler (a request, a page message, open_page) holds
that person's mailbox while it waits on the handler's thread: their later
messages and pulls wait behind it, though nobody else's do. Keep such calls
short (max_tokens, a timeout), or stream a long answer into the page tree.
A Gateway may be used from any thread while the worker runs.
"""

import binascii
import datetime
import json
import os
import threading
import time
from collections import deque

from . import stickyd_pb2 as pb
from .runtime import HostError, answer_of

# GATEWAY_WAIT bounds how long a call without a timeout waits for the host
# (seconds): the host bounds a worker's gateway call at 15 minutes
# (internal/gateway/cluster gatewayCallLimit), queueing and a long stream
# included.
GATEWAY_WAIT = 15 * 60 + 30.0
# A call with a timeout sends it as its deadline, which the gateway keeps
# (its wait in the model's queue included); the worker waits this much
# longer for the gateway's own answer (a timeout, with its kind) before it
# gives up by itself.
DEADLINE_MARGIN = 5.0


class GatewayError(Exception):
    """The gateway's refusal of a call. kind is the gateway's word for it:
    unknown_model, bad_request, budget_exceeded, quota_exceeded,
    queue_full, queue_timeout, no_deployment, rate_limited, overloaded,
    server, timeout... ("" when the call failed in the worker or its host
    without reaching the gateway: no gateway block, the channel closed, no
    answer in time). retryable says the same call may succeed later."""

    def __init__(self, kind, message, retryable=False):
        super().__init__(kind, message, retryable)
        self.kind, self.message, self.retryable = kind, message, retryable

    def __str__(self):
        if not self.kind:
            return "gateway: " + self.message
        return "gateway (%s): %s" % (self.kind, self.message)


def _error_of(e):
    """The app's GatewayError for the host's refusal (the Go SDK's
    gatewayErr): retryable when the host said UNAVAILABLE."""
    return GatewayError(e.kind, e.message, e.code == pb.Error.UNAVAILABLE)


class GatewayMessage:
    """One turn of a conversation: role is "system", "user" or
    "assistant"."""

    __slots__ = ("role", "content")

    def __init__(self, role, content):
        self.role, self.content = role, content

    def __repr__(self):
        return "GatewayMessage(%r, %r)" % (self.role, self.content)

    def __eq__(self, other):
        return isinstance(other, GatewayMessage) and (self.role, self.content) == (other.role, other.content)


class GatewayRequest:
    """A completion request. model is the gateway's name of the model (its
    configuration's model block), not a provider's; messages are
    GatewayMessage, {"role", "content"} dicts or (role, content) pairs;
    max_tokens bounds the answer (0: the provider's default)."""

    __slots__ = ("model", "messages", "max_tokens", "temperature")

    def __init__(self, model, messages=(), max_tokens=0, temperature=None):
        self.model = model
        self.messages = [_message(m) for m in messages]
        self.max_tokens = max_tokens
        self.temperature = temperature

    def __repr__(self):
        return "GatewayRequest(%r, %r, max_tokens=%r, temperature=%r)" % (
            self.model, self.messages, self.max_tokens, self.temperature)

    def to_json(self):
        """The request as the gateway reads it (empty fields left out as
        the Go SDK's omitempty does)."""
        out = {"model": self.model, "messages": [{"role": m.role, "content": m.content} for m in self.messages]}
        if self.max_tokens:
            out["max_tokens"] = int(self.max_tokens)
        if self.temperature is not None:
            out["temperature"] = float(self.temperature)
        return out


def _message(m):
    if isinstance(m, GatewayMessage):
        return m
    if isinstance(m, dict):
        return GatewayMessage(m.get("role", ""), m.get("content", ""))
    role, content = m
    return GatewayMessage(role, content)


def _request(req):
    if isinstance(req, GatewayRequest):
        return req
    if isinstance(req, dict):
        return GatewayRequest(**req)
    raise TypeError("calling the gateway: want a GatewayRequest or a dict, not %s" % type(req).__name__)


class GatewayUsage:
    """What a call consumed, in tokens. input excludes the cached input
    tokens (served from the provider's prompt cache, billed at their own
    price); cache_write counts input written to that cache (billed as
    input)."""

    __slots__ = ("input", "cached_input", "cache_write", "output")

    def __init__(self, input=0, cached_input=0, cache_write=0, output=0):
        self.input, self.cached_input, self.cache_write, self.output = input, cached_input, cache_write, output

    @classmethod
    def from_json(cls, d):
        d = d or {}
        return cls(int(d.get("input_tokens") or 0), int(d.get("cached_input_tokens") or 0),
                   int(d.get("cache_write_tokens") or 0), int(d.get("output_tokens") or 0))

    def __repr__(self):
        return "GatewayUsage(input=%d, cached_input=%d, cache_write=%d, output=%d)" % (
            self.input, self.cached_input, self.cache_write, self.output)

    def __eq__(self, other):
        return isinstance(other, GatewayUsage) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)


class GatewayResponse:
    """A whole answer. finish_reason is "stop", "length", "content_filter"
    or the provider's own word, lower case; provider and deployment say who
    served it; cost_micros is what it cost (millionths of a US dollar), as
    charged to the person."""

    __slots__ = ("id", "model", "content", "finish_reason", "usage", "provider", "deployment", "cost_micros")

    def __init__(self, id="", model="", content="", finish_reason="", usage=None, provider="", deployment="",
                 cost_micros=0):
        self.id, self.model, self.content, self.finish_reason = id, model, content, finish_reason
        self.usage = usage if usage is not None else GatewayUsage()
        self.provider, self.deployment, self.cost_micros = provider, deployment, cost_micros

    @classmethod
    def from_json(cls, d):
        return cls(d.get("id") or "", d.get("model") or "", d.get("content") or "", d.get("finish_reason") or "",
                   GatewayUsage.from_json(d.get("usage")), d.get("provider") or "", d.get("deployment") or "",
                   int(d.get("cost_micros") or 0))

    def __repr__(self):
        return "GatewayResponse(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__)


class GatewayChunk:
    """One piece of a streamed answer: delta is the text it adds. The last
    piece of a stream that ended well carries done, with finish_reason and
    usage, and cost_micros, its cost; provider and deployment name who
    serves the stream, on its first piece and its last."""

    __slots__ = ("delta", "done", "finish_reason", "usage", "provider", "deployment", "cost_micros")

    def __init__(self, delta="", done=False, finish_reason="", usage=None, provider="", deployment="", cost_micros=0):
        self.delta, self.done, self.finish_reason = delta, done, finish_reason
        self.usage = usage if usage is not None else GatewayUsage()
        self.provider, self.deployment, self.cost_micros = provider, deployment, cost_micros

    @classmethod
    def from_json(cls, d):
        return cls(d.get("delta") or "", bool(d.get("done")), d.get("finish_reason") or "",
                   GatewayUsage.from_json(d.get("usage")), d.get("provider") or "", d.get("deployment") or "",
                   int(d.get("cost_micros") or 0))

    def __repr__(self):
        return "GatewayChunk(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__)


def new_call_key():
    """Names one call: the gateway charges each key once."""
    return "wk-" + binascii.hexlify(os.urandom(12)).decode("ascii")


def _deadline_json(deadline):
    """A wall-clock deadline (seconds since the epoch) as Go's time.Time
    marshals it (RFC 3339, UTC)."""
    dt = datetime.datetime.fromtimestamp(deadline, datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def encode_call(req, timeout=None, key=None):
    """The GatewayCall's call field: {"request", "idempotency_key",
    "deadline"} (the deadline only with a timeout), as the host's
    gateway.Call reads it."""
    call = {"request": _request(req).to_json(), "idempotency_key": key or new_call_key()}
    if timeout is not None:
        call["deadline"] = _deadline_json(time.time() + timeout)
    return json.dumps(call, separators=(",", ":")).encode("utf-8")


def _wait_for(timeout):
    """How long the worker waits for the host, in all (seconds)."""
    return GATEWAY_WAIT if timeout is None else timeout + DEADLINE_MARGIN


class Gateway:
    """Calls the AI gateway on behalf of one person (their user key). Get
    one from a connection or a page: session.gateway(), page.gateway()."""

    def __init__(self, rt, session):
        self._rt = rt
        self.session = session  # who pays: the person's user key

    def _start(self, req, timeout, stream, chunks=None, wake=None):
        if timeout is not None and timeout <= 0:
            raise ValueError("calling the gateway: timeout must be positive (seconds)")
        if self._rt is None:
            raise GatewayError("", "not connected to a stickyd host", False)
        body = pb.GatewayCall(session=self.session, call=encode_call(req, timeout), stream=stream)
        try:
            return self._rt.start_call({"gateway_call": body}, chunks=chunks, wake=wake)
        except HostError as e:
            raise _error_of(e) from None

    def complete(self, req, timeout=None):
        """Runs req (a GatewayRequest, or a dict of its fields) and returns
        the whole answer, a GatewayResponse. timeout (seconds) bounds the
        call, its wait in the model's queue included (the gateway's own
        timeouts apply without one). Raises GatewayError."""
        id, c = self._start(req, timeout, False)
        if not c.done.wait(_wait_for(timeout)):
            self._rt.forget_call(id)
            raise GatewayError("", "the host did not answer within %gs" % _wait_for(timeout), True)
        try:
            env = answer_of(c)
        except HostError as e:
            raise _error_of(e) from None
        if env.WhichOneof("body") != "gateway_reply":
            raise GatewayError("", "the host answered %s" % env.WhichOneof("body"))
        try:
            return GatewayResponse.from_json(json.loads(env.gateway_reply.response))
        except (ValueError, TypeError, AttributeError) as e:
            raise GatewayError("", "decoding the gateway's answer: %s" % e) from None

    def stream(self, req, timeout=None):
        """Runs req and returns its answer as it is produced: a
        GatewayStream to iterate, yielding GatewayChunk. It returns once the
        first piece has come (a refusal, such as an unknown model or a spent
        budget, raises GatewayError here). A stream that fails midway raises
        GatewayError from the iteration, after the pieces that came before.
        Read it to the end, or close() it (a with block does) to stop
        waiting for the rest."""
        st = GatewayStream(self._rt, _wait_for(timeout))
        st._id, st._call = self._start(req, timeout, True, chunks=st._push, wake=st._wake)
        st._first()
        return st


class GatewayStream:
    """A streamed answer's pieces, in order (iterate it). The iteration ends
    after the last piece (done), or raises GatewayError when the stream
    failed midway or ended without its last piece."""

    def __init__(self, rt, wait):
        self._rt = rt
        self._deadline = time.monotonic() + wait
        self._cv = threading.Condition()  # guards _queue and _ended
        self._queue = deque()  # GatewayChunk envelopes not yet taken
        self._ended = False
        self._id, self._call = 0, None
        self._next = None  # the first piece, taken by _first
        self._failed = None  # the chunk that said the stream failed
        self._done = False  # a piece carried done

    # On the channel's reader: never waits for the app.
    def _push(self, ch):
        with self._cv:
            self._queue.append(ch)
            self._cv.notify_all()

    def _wake(self):
        with self._cv:
            self._cv.notify_all()

    def _first(self):
        try:
            self._next = self._take()
        except GatewayError:
            self.close()
            raise

    def _take(self):
        """The next piece, or None at the end; raises GatewayError for a
        stream that did not end well. Every chunk reaches the worker before
        the call's answer, and the answer, not a chunk, says how the stream
        ended."""
        while True:
            with self._cv:
                while True:
                    if self._ended:
                        return None
                    if self._queue:
                        ch = self._queue.popleft()
                        break
                    if self._call.done.is_set():
                        ch = None
                        break
                    left = self._deadline - time.monotonic()
                    if left <= 0:
                        self._end()
                        raise GatewayError("", "the host did not finish the stream in time", True)
                    self._cv.wait(left)
            if ch is None:
                self._finish()
                return None
            if ch.error:
                self._failed = ch
                continue
            try:
                c = GatewayChunk.from_json(json.loads(ch.chunk))
            except (ValueError, TypeError, AttributeError) as e:
                self._end()
                raise GatewayError("", "decoding a gateway chunk: %s" % e) from None
            self._done = self._done or c.done
            return c

    def _finish(self):
        """The stream's end, as its answer says: raises its error, if any."""
        self._end()
        try:
            answer_of(self._call)
        except HostError as e:
            raise _error_of(e) from None
        if self._failed is not None:
            raise GatewayError(self._failed.error_kind, self._failed.error)
        if not self._done:
            raise GatewayError("server", "the stream ended without its last chunk", True)

    def _end(self):
        with self._cv:
            self._ended = True
            self._queue.clear()
        if self._rt is not None and self._id:
            self._rt.forget_call(self._id)

    def close(self):
        """Stops taking the stream: what comes after is dropped."""
        self._next = None
        self._end()

    def __iter__(self):
        return self

    def __next__(self):
        if self._next is not None:
            c, self._next = self._next, None
            return c
        c = self._take()
        if c is None:
            raise StopIteration
        return c

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
