"""pyshop: the smallest shop a stickyd Python worker hosts, in plain WSGI
(no framework). Run it as a group with runtime "python3" and command
"pyshop.app:application" (docs/python.md).

Routes:
  GET  /               who serves this connection
  GET  /whoami         {"conn", "user", "worker"} as JSON
  POST /login?user=N   logs the person in (every other query parameter is an
                       attribute of the person, for group rules)
  GET  /cart           the session's cart: {"items": [...], "worker"}
  POST /cart/add?item=X, POST /cart/clear

Pages of kind "counter" hold {"count": N}; the message {"op": "inc"}
increments it and {"op": "note", "text": T} appends note/N (one delta per
note). The cart lives in the session's values and the counter in the page
tree: both move with the person between workers and across restarts.
"""

import json
from urllib.parse import parse_qs

import stickyd

__version__ = "1"

# The state-schema version of each page kind and the oldest one read
# (docs/moves.md, the version rule): a page of another version, or of a
# kind this build does not know, restarts clean when it arrives here.
# Version 0 is the Go counter example's page (it declares no schemas): the
# same {"count", "notes", "note/N"}, so its people can move here and back.
schemas = {"counter": (1, 0)}


def _json(start_response, value, status="200 OK"):
    body = json.dumps(value).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _text(start_response, text, status="200 OK"):
    body = text.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [body]


def application(environ, start_response):
    s = stickyd.session()
    if s is None:
        return _text(start_response, "not running under stickyd\n", "500 Internal Server Error")
    path, method = environ["PATH_INFO"], environ["REQUEST_METHOD"]
    q = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
    if path == "/":
        return _text(start_response, "pyshop: connection %s on %s\n" % (s.conn, s.worker_id))
    if path == "/whoami":
        return _json(start_response, {"conn": s.conn, "user": s.user, "worker": s.worker_id})
    if path == "/login" and method == "POST":
        try:
            s.login(q.get("user", ""), {k: v for k, v in q.items() if k != "user"})
        except stickyd.BadName as e:
            return _text(start_response, "%s\n" % e, "400 Bad Request")
        return _json(start_response, {"user": s.user, "worker": s.worker_id})
    if path == "/cart":
        return _json(start_response, {"items": s.values.get("cart", []), "worker": s.worker_id})
    if path == "/cart/add" and method == "POST":
        item = q.get("item", "")
        if not item:
            return _text(start_response, "add which item?\n", "400 Bad Request")
        items = list(s.values.get("cart", []))
        items.append(item)
        s.values.set("cart", items)
        return _json(start_response, {"items": items, "worker": s.worker_id})
    if path == "/cart/clear" and method == "POST":
        s.values.delete("cart")
        return _json(start_response, {"items": [], "worker": s.worker_id})
    return _text(start_response, "not found\n", "404 Not Found")


def open_page(page):
    """A new counter page starts at zero."""
    page.tree.set("count", 0)


def message(page, msg):
    t = page.tree
    op = (msg or {}).get("op")
    if op == "inc":
        n = t.number("count") + 1
        t.set("count", n)
        return {"count": n, "worker": page.session.worker_id}
    if op == "note":
        n = int(t.number("notes"))
        t.set("note/%d" % n, str(msg.get("text", "")))
        t.set("notes", n + 1)
        return n + 1
    raise stickyd.Refused("unknown op %r" % op)
