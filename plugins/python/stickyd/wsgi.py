"""WSGI (PEP 3333) over the channel: an HTTPRequest frame becomes an
environ, the app's status, headers and body become the HTTPResponse. The
response is buffered and sent whole, like the Go SDK's recorder.

identify() is the adapter that names the person for any WSGI app whose
login stickyd has no adapter for (stickyd.django and stickyd.flask are the
others: docs/existing-apps.md).
"""

import io
import sys
from urllib.parse import unquote_to_bytes

from . import adapters
from . import stickyd_pb2 as pb
from .session import current

# UNKNOWN, returned by identify's username_of_environ, leaves the
# connection as it is.
UNKNOWN = adapters.UNKNOWN

# MAX_BODY bounds a response body (the channel carries it in one envelope:
# plugins/worker/site.go maxSiteBody).
MAX_BODY = (512 << 20) - (1 << 20)


class BodyTooLarge(Exception):
    pass


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


def call(app, env):
    """Runs app on env and returns the HTTPResponse."""
    state = {"status": None, "headers": None}
    body = []
    size = [0]

    def write(data):
        if state["status"] is None:
            raise AssertionError("write() before start_response()")
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError("a WSGI body must be bytes, not %s" % type(data).__name__)
        size[0] += len(data)
        if size[0] > MAX_BODY:
            raise BodyTooLarge("response body too large (%d bytes)" % MAX_BODY)
        body.append(bytes(data))

    def start_response(status, headers, exc_info=None):
        # Nothing is sent before the app returns, so a call with exc_info
        # may always replace the headers (PEP 3333, before sending).
        if exc_info is None and state["status"] is not None:
            raise AssertionError("start_response() called twice without exc_info")
        state["status"], state["headers"] = status, list(headers)
        return write

    result = app(env, start_response)
    try:
        for chunk in result:
            if chunk:
                write(chunk)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    if state["status"] is None:
        raise AssertionError("the WSGI app returned without calling start_response()")
    code = int(str(state["status"]).split(" ", 1)[0])
    out = pb.HTTPResponse(status=code, body=b"".join(body))
    grouped = {}
    for name, value in state["headers"]:
        grouped.setdefault(canonical(name), []).append(_unnative(value))
    for name, values in grouped.items():
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
