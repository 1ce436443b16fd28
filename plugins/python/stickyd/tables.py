"""Tables: the Go SDK's rules (plugins/worker/tables.go) in Python.

A page subscribes to the tables it shows (page.subscribe); when the app
changes a table it says so (stickyd.publish). This worker's subscribed
pages get the change first, each in its person's mailbox; then the worker
tells its host (a Publish notice), and the host carries it to the other
workers whose pages subscribe, and only to them: each worker tells its host
the whole set of tables its pages subscribe to (a Tables notice) whenever
that set changed, after the mailbox item that changed it.

In the person's mailbox, each of their pages subscribed to the changed
table drops its cached values marked with it (page.cached: a real delete,
which the page receives as a delta), then the app's on_table_change(page,
change) runs, if it has one. Subscriptions and cache marks travel with the
page when its person moves (PagePackage.tables and marks, as the Go SDK
writes them); a page that arrives hears once of each table it subscribes
to, with no data and no origin: it may have changed on the way.
"""

import json
import re
import threading

from . import session as _session  # session imports this module: looked up at call time
from .tree import dumps, normalize

_TABLE_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}\Z")

# CACHE_PREFIX is where page.cached keeps its values in the page tree.
CACHE_PREFIX = "cache/"


class BadTable(ValueError):
    """A table name stickyd cannot carry (the Go SDK's ErrBadTable): use
    1-64 of a-z 0-9 _ . -, starting with a letter or digit."""


def check_tables(tables):
    """The table names of tables as a list; raises BadTable for one stickyd
    cannot carry, and TypeError for a bare str (a common slip:
    page.cached("k", "orders", f) would be the tables "o", "r", "d"...)."""
    if isinstance(tables, (str, bytes)):
        raise TypeError("tables: want a list of table names, not the %s %r" % (type(tables).__name__, tables))
    tables = list(tables)
    for t in tables:
        if not isinstance(t, str) or not _TABLE_RE.match(t):
            raise BadTable("table %r: bad table name: use 1-64 of a-z 0-9 _ . -, starting with a letter or digit" % (t,))
    return tables


class TableChange:
    """A change of a table, as the app that made it described it: table,
    data (what the publisher passed to publish, decoded from JSON; None
    when it passed nothing, and on a page's arrival from a move) and origin
    (the worker that published it; "" on an arrival)."""

    __slots__ = ("table", "data", "origin")

    def __init__(self, table, data, origin):
        self.table, self.data, self.origin = table, data, origin

    def __repr__(self):
        return "TableChange(table=%r, data=%r, origin=%r)" % (self.table, self.data, self.origin)


def publish(table, data=None):
    """Tells every page subscribed to table, on every worker, that the app
    changed it; data (JSON-like, or None) describes the change. This
    worker's subscribed pages get it first, each in its person's mailbox;
    then the host carries it to the other workers with subscribers. A table
    nobody watches costs nothing. Call it while serving a request, a page
    message or a table change."""
    s = _session.current()
    if s is None:
        raise RuntimeError("publishing a change of %r: not in a stickyd handler" % (table,))
    s._rt.publish(table, data)


def encode_data(table, data):
    """The JSON a change carries: empty for None, as the Go SDK sends nil."""
    if data is None:
        return b""
    try:
        return dumps(normalize(data))
    except (TypeError, ValueError) as e:
        raise type(e)("publishing a change of %r: %s" % (table, e)) from None


def decode_data(raw):
    """What a change's JSON says (None when empty). Raises ValueError when it
    is not JSON."""
    return json.loads(raw) if raw else None


class Subscriptions:
    """The worker's index of the pages subscribed to each table, and the set
    last told to the host. It holds each subscribed page once per table it
    subscribes to, as the pages do (Page._tables; a table name is at most
    64 bytes): it is as large as what the worker's people hold, and shrinks
    as pages close and people leave. Guarded by its own lock: pages
    subscribe from their person's mailbox, changes are routed from the
    channel's reader and from any mailbox."""

    def __init__(self):
        self._mu = threading.Lock()
        self._subs = {}  # table -> set of Page
        self._sent = []  # the sorted set last told to the host

    def add(self, page, tables):
        with self._mu:
            for t in tables:
                self._subs.setdefault(t, set()).add(page)

    def remove(self, page, tables):
        with self._mu:
            for t in tables:
                pages = self._subs.get(t)
                if pages is not None:
                    pages.discard(page)
                    if not pages:
                        del self._subs[t]

    def users(self, table):
        """The user keys of the people with a page subscribed to table."""
        with self._mu:
            return {p.session.user_key() for p in self._subs.get(table, ())}

    def pages_of(self, table, user):
        """The pages of the person user subscribed to table, by id."""
        with self._mu:
            pages = [p for p in self._subs.get(table, ()) if p.session.user_key() == user]
        return sorted(pages, key=lambda p: p.id)

    def sync(self, tell):
        """Calls tell(tables), the sorted set of subscribed tables, if it
        changed since the last time; under the lock, so that the host hears
        the sets in the order they were (tell must not block)."""
        with self._mu:
            now = sorted(self._subs)
            if now != self._sent:
                self._sent = now
                tell(now)
