"""pycounter: the part of the Go counter example (plugins/examples/counter)
that the live-data end-to-end tests use, in Python, so that they run the
same steps against Go workers and Python workers (test/e2e tables_test.go,
store_test.go, python_live_test.go). Run it as a group with runtime
"python3" and command "pycounter.app:application" (docs/python.md).

Routes, as the counter's:
  GET  /whoami         {"conn", "user", "worker"} as JSON
  POST /login?user=N   logs the person in (every other query parameter is an
                       attribute of the person)

Pages of kind "counter" start with {"count": 0} and take the counter's
messages for live data (docs/data.md):
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
    if path == "/whoami":
        return _json(start_response, {"conn": s.conn, "user": s.user, "worker": s.worker_id})
    if path == "/login" and method == "POST":
        try:
            s.login(q.get("user", ""), {k: v for k, v in q.items() if k != "user"})
        except stickyd.BadName as e:
            return _text(start_response, "%s\n" % e, "400 Bad Request")
        return _json(start_response, {"user": s.user, "worker": s.worker_id})
    return _text(start_response, "404 page not found\n", "404 Not Found")


def open_page(page):
    """A new page starts with a zero counter."""
    page.tree.set("count", 0)


def message(page, msg):
    """The counter's live-data messages (the module's doc). A failure is the
    message's answer, as the Go counter returns its errors."""
    msg = msg or {}
    op = msg.get("op")
    try:
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
    except (stickyd.StoreError, ValueError, TypeError) as e:
        raise stickyd.Refused(str(e))
    raise stickyd.Refused("unknown op %r" % op)


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
