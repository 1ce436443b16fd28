"""A WSGI app whose /spin request holds Python's GIL while it computes: a
backtracking regular expression, run by C code that never lets the GIL go,
sized to take at least about ?s= seconds on this machine (up to twice). /pid names the worker's
process."""

import json
import math
import os
import re
import time
from urllib.parse import parse_qs

_PATTERN = re.compile(r"(a+)+$")


def _match(n):
    start = time.perf_counter()
    _PATTERN.match("a" * n + "b")
    return time.perf_counter() - start


def application(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if path == "/spin":
        secs = float(parse_qs(environ.get("QUERY_STRING", "")).get("s", ["4"])[0])
        # Each more "a" about doubles the time: measure 20 (the quickest
        # of three, so that a moment's load on the machine does not size
        # the request short), then size it.
        t20 = max(min(_match(20) for _ in range(3)), 1e-4)
        n = 20 + max(0, math.ceil(math.log2(secs / t20)))
        body = {"n": n, "took": _match(n), "pid": os.getpid()}
    elif path == "/pid":
        body = {"pid": os.getpid()}
    else:
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]
    out = json.dumps(body).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(out)))])
    return [out]


def create_app(made_by):
    """An application factory, as "busyapp:create_app('factory')" names it."""

    def app(environ, start_response):
        if environ.get("PATH_INFO") == "/made-by":
            out = json.dumps({"made_by": made_by}).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(out)))])
            return [out]
        return application(environ, start_response)

    return app
