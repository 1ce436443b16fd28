"""WSGI (PEP 3333) over the channel: an HTTPRequest frame becomes an
environ, the app's status, headers and body become the HTTPResponse.

A body that is over promptly (most are) is buffered and sent whole, like
the Go SDK's recorder: a list, Django's HttpResponse (streaming is False),
any iterable that ends within STREAM_AFTER. PEP 3333 says a server must not
delay a block the app yielded, so an iterable still running STREAM_AFTER
after the response began (it is blocked producing the next block) becomes a
stream (stickyd.streams): a Scheduler timer answers the frame with the
status, the headers and the body so far, and the thread running the body
goes on writing the rest into the stream.

identify() is the adapter that names the person for any WSGI app whose
login stickyd has no adapter for (stickyd.django and stickyd.flask are the
others: docs/existing-apps.md).
"""

import io
import sys
import threading
import traceback
from urllib.parse import unquote_to_bytes

from . import adapters
from . import stickyd_pb2 as pb
from .session import current

# UNKNOWN, returned by identify's username_of_environ, leaves the
# connection as it is.
UNKNOWN = adapters.UNKNOWN

# MAX_BODY bounds what is buffered of a response (the channel carries it in
# one envelope: plugins/worker/site.go maxSiteBody): a whole body, or a
# stream's head; not a stream's total.
MAX_BODY = (512 << 20) - (1 << 20)

# STREAM_AFTER: a body still running this long after the response began
# (the app returned its iterable and called start_response) is streamed
# (seconds).
STREAM_AFTER = 0.02


class BodyTooLarge(Exception):
    pass


class _Canceled(Exception):
    """Raised into the body's thread when its stream was dropped (the client
    left, or nobody read it): the body stops at its next block."""


def environ(req, session):
    """The PEP 3333 environ of an HTTPRequest."""
    path, _, query = req.url.partition("?")
    host = req.host
    name, port = host, "80"
    if host.startswith("["):  # [v6]:port
        end = host.find("]")
        name, rest = host[: end + 1], host[end + 1:]
        if rest.startswith(":"):
            port = rest[1:]
    elif ":" in host:
        name, port = host.rsplit(":", 1)
    raddr, rport = req.remote_addr, ""
    if raddr.startswith("["):
        end = raddr.find("]")
        raddr, rport = raddr[1:end], raddr[end + 2:]
    elif raddr.count(":") == 1:
        raddr, rport = raddr.split(":")
    env = {
        "REQUEST_METHOD": req.method,
        "SCRIPT_NAME": "",
        # PEP 3333: native strings holding the bytes as latin-1.
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "QUERY_STRING": _native(query),
        "SERVER_NAME": name or "localhost",
        "SERVER_PORT": port,
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": raddr,
        "REMOTE_PORT": rport,
        "CONTENT_LENGTH": str(len(req.body)) if req.body else "",
        "HTTP_HOST": _native(host),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(req.body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.input_terminated": True,
        "stickyd.session": session,
    }
    for h in req.headers:
        key = h.name.upper().replace("-", "_")
        sep = "; " if key == "COOKIE" else ", "
        value = _native(sep.join(h.values))
        if key == "CONTENT_TYPE":
            env["CONTENT_TYPE"] = value
        elif key == "CONTENT_LENGTH":
            continue  # the body is whole: its length is known
        else:
            env["HTTP_" + key] = value
    if env.get("HTTP_X_FORWARDED_PROTO", "").lower() == "https":
        env["wsgi.url_scheme"] = "https"
    return env


def _native(s):
    """A PEP 3333 native string: the bytes (UTF-8 on the channel) as latin-1."""
    return s.encode("utf-8", "surrogateescape").decode("latin-1")


def _unnative(s):
    """A header value the app gave (latin-1 code points) as the channel's
    UTF-8 text."""
    return s.encode("latin-1").decode("utf-8", "replace")


def canonical(name):
    """Go's canonical header key ("content-type" -> "Content-Type"), so the
    front reads the app's headers as it reads a Go app's."""
    return "-".join(p[:1].upper() + p[1:].lower() for p in name.split("-"))


def call(app, env, streams=None, answer=None):
    """Runs app on env and returns the HTTPResponse, whole. Given streams
    (stickyd.streams.Streams) and answer(head), a body that is still running
    STREAM_AFTER after the response began is streamed: answer sends the
    frame's reply early (head, with its stream id), on the Scheduler's thread,
    and returns False if it could not; call then produces the rest into the
    stream and returns None."""
    r = _Response(streams, answer)
    result = app(env, r.start_response)
    if streams is not None and not isinstance(result, (list, tuple)) and getattr(result, "streaming", None) is not False:
        r.watch()
    return r.run(result)


class _Response:
    """One app call's answer: its status and headers, and its body, held
    until the response goes whole or, once it became a stream, written into
    the stream. Exactly one of the two happens: whichever of the body's end
    (settle) and the timer (_due) comes first under _mu decides."""

    def __init__(self, streams, answer):
        self._streams = streams
        self._answer = answer
        self._mu = threading.Lock()  # guards everything below
        self._status = None
        self._headers = None  # [(canonical name, [values])]
        self._body = []
        self._size = 0
        self._watched = False  # the body may become a stream
        self._timer = None
        self._settled = False  # the body ended: it goes whole unless it streams
        self.stream = None  # once streamed; fixed once settled

    def start_response(self, status, headers, exc_info=None):
        code = int(str(status).split(" ", 1)[0])
        grouped = {}
        for name, value in headers:
            grouped.setdefault(canonical(name), []).append(_unnative(value))
        with self._mu:
            if exc_info is not None and self.stream is not None:
                # The headers went with the stream's head (PEP 3333).
                raise exc_info[1].with_traceback(exc_info[2])
            if exc_info is None and self._status is not None:
                raise AssertionError("start_response() called twice without exc_info")
            self._status, self._headers = code, list(grouped.items())
            self._arm_locked()
        return self.write

    def write(self, data):
        if self._status is None:
            raise AssertionError("write() before start_response()")
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError("a WSGI body must be bytes, not %s" % type(data).__name__)
        with self._mu:
            st = self.stream
            if st is None:
                self._size += len(data)
                if self._size > MAX_BODY:
                    raise BodyTooLarge("response body too large (%d bytes)" % MAX_BODY)
                self._body.append(bytes(data))
                return
        if not st.write(data):  # copied into the stream's buffer
            raise _Canceled("the client left")

    def watch(self):
        """Lets the body become a stream: the timer starts now, or at
        start_response if the iterable calls it."""
        with self._mu:
            self._watched = True
            self._arm_locked()

    def _arm_locked(self):
        if self._watched and self._timer is None and self._status is not None:
            self._timer = self._streams.sched.after(STREAM_AFTER, self._due)

    def _due(self):
        """The body is still running STREAM_AFTER after the response began:
        the frame is answered now with what there is, and the rest goes into
        a stream (unless streams are at their bound: then it goes whole)."""
        with self._mu:
            if self._settled:
                return
            st = self._streams.open()
            if st is None:
                return
            self.stream = st
            head = self._response(b"".join(self._body))
            head.stream = st.id
            self._body = []
            # Under _mu: the body cannot end (and its thread go back to the
            # person's mailbox) before the frame is answered and the mailbox
            # handed over.
            if not self._answer(head):
                st.cancel()

    def run(self, result):
        """Runs the body to its end and closes it (once, whatever happens).
        Returns the whole response, or None when it went as a stream."""
        try:
            try:
                for chunk in result:
                    if chunk:
                        self.write(chunk)
            finally:
                with self._mu:
                    self._settled = True
                    if self._timer is not None:
                        self._timer.cancel()
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        except Exception as e:
            if self.stream is None:
                raise
            if isinstance(e, _Canceled):
                self.stream.finish()
            else:
                self.stream.finish(repr(e), traceback.format_exc())
            return None
        if self.stream is not None:
            self.stream.finish()
            return None
        if self._status is None:
            raise AssertionError("the WSGI app returned without calling start_response()")
        return self._response(b"".join(self._body))

    def _response(self, body):
        out = pb.HTTPResponse(status=self._status, body=body)
        for name, values in self._headers:
            out.headers.add(name=name, values=values)
        return out


def identify(app, username_of_environ, attrs_of_environ=None):
    """Wraps a WSGI app so that every request names the stickyd person:
    once the app has answered (its body produced and closed),
    username_of_environ(environ) says who the request's user is: a name
    logs the connection in (once per connection: the adapters' rule),
    None is nobody (a logout: stickyd.adapters.log_out), UNKNOWN leaves the
    connection as it is. attrs_of_environ(environ), if given, returns the
    person's attributes at a login. Outside stickyd the app runs as is.

        application = stickyd.wsgi.identify(application, lambda env: env.get("REMOTE_USER"))
    """

    def wrapped(environ, start_response):
        return _Identified(app(environ, start_response), environ, username_of_environ, attrs_of_environ)

    return wrapped


class _Identified:
    """An app's answer that names the person when it is closed."""

    def __init__(self, result, environ, name_of, attrs_of):
        self._result = result
        self._environ = environ
        self._name_of = name_of
        self._attrs_of = attrs_of

    def __iter__(self):
        return iter(self._result)

    def close(self):
        try:
            close = getattr(self._result, "close", None)
            if close is not None:
                close()
        finally:
            s = current()
            if s is not None:
                name = self._name_of(self._environ)
                attrs = None
                if self._attrs_of is not None and name and name is not UNKNOWN:
                    attrs = self._attrs_of(self._environ)
                adapters.identify(s, name, attrs)
