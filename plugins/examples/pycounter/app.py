"""pycounter: the part of the Go counter example (plugins/examples/counter)
that the live-data, AI gateway and maintenance end-to-end tests use, in
Python, so that they run the same steps against Go workers and Python
workers (test/e2e tables_test.go, store_test.go, python_live_test.go,
gateway_worker_test.go, maintenance_test.go). Run it as a group with
runtime "python3" and command "pycounter.app:application"
(docs/python.md).

Routes, as the counter's:
  GET  /               "counter: connection C on W"
  GET  /orders         "orders: connection C on W" (needs db-a)
  GET  /whoami         {"conn", "user", "worker"} as JSON
  POST /login?user=N   logs the person in (every other query parameter is an
                       attribute of the person)

Pages of kind "counter" start with {"count": 0} and take the counter's
messages:
  inc                  count one more: {"count", "worker"}
  order                an inc of "orders" that needs db-a: it waits out
                       db-a's maintenance windows (docs/maintenance.md)
  ask {text}           text to the AI gateway's model "small", charged to
                       the person: {"answer", "cost_micros"}
  ask_stream {text}    the same, streamed into the page tree at "answer",
                       one delta per piece: {"answer", "output_tokens"}
and for live data (docs/data.md):
  sub {table}          subscribe the page to table
  pub {table, v}       publish a change of table that says v
  cache {key, table, v}  the value cached under key, marked with table
                       (v when it is computed)
  sget {paths}         read the global store
  sincr {key, paths, lease_ms}  add one to the number at key under a grant
                       on paths (which must hold key)
  slate {…, ms}        the same with a pause of ms between the grant and the
                       commit: past the lease, the commit is refused
  shold {paths, lease_ms}  take a grant and keep it (its token)
Every table change the page hears is counted at heard/<table>, with when
(heard_at, unix nanoseconds) and what it said (heard_data). The page is the
counter's, without a schema version (the Go counter declares none), so a
person's pages move between the two apps.
"""

import json
import time
from urllib.parse import parse_qs

import stickyd

__version__ = "1"


def _json(start_response, value, status="200 OK"):
    body = json.dumps(value).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _text(start_response, text, status):
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [text.encode()]


def application(environ, start_response):
    s = stickyd.session()
    if s is None:
        return _text(start_response, "not running under stickyd\n", "500 Internal Server Error")
    path, method = environ["PATH_INFO"], environ["REQUEST_METHOD"]
    q = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
    if path == "/":
        return _text(start_response, "counter: connection %s on %s\n" % (s.conn, s.worker_id), "200 OK")
    if path == "/orders":
        return _text(start_response, "orders: connection %s on %s\n" % (s.conn, s.worker_id), "200 OK")
    if path == "/whoami":
        return _json(start_response, {"conn": s.conn, "user": s.user, "worker": s.worker_id})
    if path == "/login" and method == "POST":
        try:
            s.login(q.get("user", ""), {k: v for k, v in q.items() if k != "user"})
        except stickyd.BadName as e:
            return _text(start_response, "%s\n" % e, "400 Bad Request")
        return _json(start_response, {"user": s.user, "worker": s.worker_id})
    return _text(start_response, "404 page not found\n", "404 Not Found")


# The backends its routes and ops need (docs/maintenance.md): an order (the
# "order" op, the /orders route) writes to db-a; the rest needs no backend.
needs = stickyd.Needs().route("/orders", "db-a").op("order", "db-a")

# The gateway's model the ask ops use.
ASK_MODEL = "small"


def open_page(page):
    """A new page starts with a zero counter."""
    page.tree.set("count", 0)


def message(page, msg):
    """The counter's live-data messages (the module's doc). A failure is the
    message's answer, as the Go counter returns its errors."""
    msg = msg or {}
    op = msg.get("op")
    t = page.tree
    try:
        if op == "inc":
            n = t.number("count") + 1
            t.set("count", n)
            return {"count": n, "worker": page.session.worker_id}
        if op == "note":
            # Notes append one entry each: the page receives exactly one
            # delta per note, so order and completeness can be checked.
            n = int(t.number("notes"))
            t.set("note/%d" % n, msg.get("text", ""))
            t.set("notes", n + 1)
            return n + 1
        if op == "fill":
            # The page holds a blob of that many bytes (governance's tests).
            n = int(msg.get("bytes") or 0)
            if n < 0 or n > 256 << 20:
                raise ValueError("fill: bytes must be 0..256 MiB")
            t.set("blob", "x" * n)
            return n
        if op == "order":
            # An inc that needs db-a: it waits out db-a's maintenance windows.
            n = t.number("orders") + 1
            t.set("orders", n)
            return {"orders": n, "worker": page.session.worker_id, "at": time.time_ns()}
        if op == "ask":
            # The call holds this person's mailbox until the answer comes.
            r = page.gateway().complete(_ask_request(msg.get("text", "")))
            return {"answer": r.content, "cost_micros": r.cost_micros}
        if op == "ask_stream":
            return _ask_stream(page, msg.get("text", ""))
        if op == "sub":
            return page.subscribe(msg.get("table", ""))
        if op == "pub":
            return stickyd.publish(msg.get("table", ""), msg.get("v"))
        if op == "cache":
            return page.cached(msg.get("key", ""), [msg.get("table", "")], lambda: msg.get("v"))
        if op == "sget":
            return stickyd.store.get(*msg.get("paths", []))
        if op == "sincr":
            return _incr(msg, 0)
        if op == "slate":
            ms = msg.get("ms", 0)
            if not 0 <= ms <= 60000:
                raise ValueError("slate: ms must be 0..60000")
            return _incr(msg, ms / 1000.0)
        if op == "shold":
            # Kept: it ends with its lease, its worker or its person's move.
            return stickyd.store.acquire(msg.get("paths", []), lease=msg.get("lease_ms", 0) / 1000.0).token
    except (stickyd.StoreError, stickyd.GatewayError, ValueError, TypeError) as e:
        raise stickyd.Refused(str(e))
    raise stickyd.Refused("unknown op %r" % op)


def _ask_request(text):
    return stickyd.GatewayRequest(ASK_MODEL, [stickyd.GatewayMessage("user", text)])


def _ask_stream(page, text):
    """Streams the answer to text into the page tree at "answer", one delta
    per piece, and returns the whole answer with its usage."""
    answer, last = "", None
    with page.gateway().stream(_ask_request(text)) as st:
        for c in st:
            if c.delta:
                answer += c.delta
                page.tree.set("answer", answer)
            last = c
    if last is None or not last.done:
        raise stickyd.Refused("ask_stream: the stream ended without its last piece")
    return {"answer": answer, "output_tokens": last.usage.output}


def _incr(msg, pause):
    """Adds one to the number at key of the global store under a grant on
    paths, pausing pause seconds before the commit; the new value."""
    key = msg.get("key", "")
    g = stickyd.store.acquire(msg.get("paths", []), lease=msg.get("lease_ms", 0) / 1000.0)
    n = g.values.get(key, 0)
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        g.release()
        raise ValueError("%s holds %s, not a number" % (key, json.dumps(n)))
    if pause:
        time.sleep(pause)
    g.commit({key: n + 1})
    return n + 1


def on_table_change(page, change):
    """Counts the changes each table brought the page, and notes when the
    last one arrived and what it said."""
    t = page.tree
    t.set("heard/" + change.table, t.number("heard/" + change.table) + 1)
    t.set("heard_at/" + change.table, float(time.time_ns()))
    t.set("heard_data/" + change.table, change.data)
