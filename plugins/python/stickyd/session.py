"""Connections (Session) and pages (Page): what an app touches.

A Session is one browser with its cookie. The site may name it while
serving its first request (name_connection); otherwise it has 128 random
bits. login() declares who the person is: from the next frame on, every
connection of that person lives on one worker. A Page is one browser tab of
a connection, with its own Tree.
"""

import base64
import collections
import os
import re
import threading

from . import stickyd_pb2 as pb
from .checkpoint import PageMarks
from .collector import Collector
from .tables import CACHE_PREFIX, check_tables
from .tree import DELETE, StateTooLarge, Tree  # noqa: F401 (StateTooLarge: the apps')

ANONYMOUS_PREFIX = "~"  # internal/protocol.AnonymousPrefix

_NAME_RE = re.compile(r"^[A-Za-z0-9._@-]{1,128}\Z")
_ATTR_KEY_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}\Z")


class BadName(ValueError):
    """A connection or user name stickyd cannot carry: use 1-128 of
    A-Z a-z 0-9 . _ @ - (users may not start with ~)."""


class Named(RuntimeError):
    """name_connection outside a connection's first request."""


_current = threading.local()


def current():
    """The connection the running request or page message belongs to, or
    None outside stickyd."""
    return getattr(_current, "session", None)


class _Serving:
    """Sets the current session for the duration of a with block."""

    def __init__(self, s):
        self.s = s

    def __enter__(self):
        self.prev = getattr(_current, "session", None)
        _current.session = self.s

    def __exit__(self, *exc):
        _current.session = self.prev


def random_name():
    return base64.b32encode(os.urandom(16)).decode("ascii").rstrip("=").lower()


# ASSET_EXTENSIONS are the paths' endings of static files (as the Go SDK's).
ASSET_EXTENSIONS = frozenset((".css", ".js", ".mjs", ".map", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico",
                              ".webp", ".avif", ".woff", ".woff2", ".ttf", ".otf", ".eot", ".txt", ".xml",
                              ".webmanifest"))


class Session:
    """One connection of a person. Touched only from the person's mailbox."""

    def __init__(self, rt, name, user, is_new=False):
        self._rt = rt
        self._name = name
        self._user = user  # "" while anonymous
        self._login = ""  # declared during the current frame
        self._attrs = None
        self._forget = False  # forget() was called during the current frame
        self._forgotten = False  # the host was asked to forget the person
        self._is_new = is_new
        self._keep = False  # the first request touched the connection: see keep()
        # The connection's own data (no deltas); it moves with the person.
        self.values = Tree(self._values_changed)
        self.pages = {}
        # Its last checkpoint piece's (user, epoch), and whether its values
        # changed since (checkpoint.py).
        self.ck_mark = None
        self.ck_dirty = False

    def _values_changed(self, op, path, value):
        if self._rt is not None:
            self._rt._ck.conn_changed(self)

    @property
    def conn(self):
        """The connection's name (random on the first request until
        name_connection)."""
        return self._name

    @property
    def is_new(self):
        """Whether this is the connection's first request."""
        return self._is_new

    @property
    def user(self):
        """Who the person is, or "" before login."""
        return self._login or self._user

    @property
    def worker_id(self):
        """The worker holding this connection now ("web-2")."""
        return self._rt.worker_id

    def name_connection(self, name):
        if not self._is_new:
            raise Named("connection is already named")
        if not _NAME_RE.match(name or ""):
            raise BadName("naming connection %r: bad name" % name)
        self._name = name
        self._keep = True

    def keep(self):
        """Says the connection of this first request is a visitor's even if
        the request is one that names nobody by default (a HEAD, a GET of a
        static asset or answered with an error, whose handler did not touch
        the session): the answer sets the cookie and the connection is
        recorded."""
        self._keep = True

    def leaves_no_trace(self, method, url, status):
        """Whether a new connection's first request names nobody (as the Go
        SDK's leavesNoTrace): a HEAD, or a GET of a static asset (by its
        path's ending) or answered with an error, whose handler did not
        name the connection, log in, write a value or call keep()."""
        if self._keep or self._login or self.values.get(""):
            return False
        if method == "HEAD":
            return True
        if method != "GET":
            return False
        path = url.partition("?")[0]
        return status >= 400 or os.path.splitext(path)[1].lower() in ASSET_EXTENSIONS

    def login(self, user, attrs=None):
        """Declares who the person is, with attributes (customer, plan...)
        that the operator's group rules may match. This connection's pages
        stay with it when this worker becomes the person's home."""
        if not _NAME_RE.match(user or "") or user.startswith(ANONYMOUS_PREFIX):
            raise BadName("logging in %r: bad name" % user)
        attrs = dict(attrs or {})
        if len(attrs) > 16:
            raise BadName("logging in %r: at most 16 attributes" % user)
        for k, v in attrs.items():
            if not _ATTR_KEY_RE.match(k) or not isinstance(v, str) or len(v.encode()) > 256:
                raise BadName("logging in %r: bad attribute %r" % (user, k))
        self._login = user
        self._attrs = attrs

    @property
    def pending_login(self):
        """The person this frame's login() declared, when it is not the
        connection's person yet, else "". Once the frame is answered the
        front binds the connection to that person; if they live on another
        worker, the connection joins them there and its values here are let
        go: what must follow it carries itself in the answer (the adapters'
        hand-over, docs/existing-apps.md)."""
        return self._login if self._login and self._login != self._user else ""

    def connections(self):
        """The connections of this connection's person that this worker
        holds (Session objects, this one included, by name): all of them,
        since a person lives on one worker, once each has reached it (a
        connection that joined the person at a login elsewhere counts from
        its first request here). Read them only from the person's frames."""
        return self._rt.connections_of(self.user_key())

    def forget(self):
        """Forgets the person this connection belongs to, everywhere, once
        the current request is answered: all their connections, their
        pages' state, their parked package and their place in the maps (as
        `stickyd user forget` does; the Go SDK's Session.Forget). Call it at
        a logout. The browser's next request is a newcomer's, with a new
        connection. Asked once per connection: later calls do nothing."""
        if not self._forgotten:
            self._forget = True

    def user_key(self):
        return self._user or ANONYMOUS_PREFIX + self._name

    def gateway(self):
        """The AI gateway client that charges this connection's person
        (their user key as of this frame: a login takes effect from the
        connection's next frame); gateway.py."""
        from .gateway import Gateway
        return Gateway(self._rt, self.user_key())


class Page:
    """One browser tab of a connection, with its own Tree: the truth of its
    state. local holds live objects derived from the tree (an index, a
    cursor); it is a cache that does not travel when the person moves.
    Its table subscriptions and cached values do (tables.py)."""

    def __init__(self, session, id, kind, schema, scheduler):
        self.id = id
        self.kind = kind
        self.schema = schema  # the state-schema version this build declares for kind
        self.session = session
        self.local = {}
        self.coll = Collector(scheduler, lambda: self.tree.snapshot())
        # The answers of the page's recent messages by msg_id, oldest first
        # (at most MAX_ANSWERED): a message sent again is answered from
        # here, never run twice; they travel with the page.
        self.answered = collections.OrderedDict()
        # The tables the page subscribes to, and the tables each cached
        # value's tree path came from (cached): used from the person's
        # mailbox; both travel with the page.
        self._tables = set()
        self._marks = {}
        # The page's writes since a precopy, while a move is on its way
        # (precopy.py), and its checkpoint bookkeeping (checkpoint.py);
        # used from the person's mailbox.
        self.journal = None
        self.ck = PageMarks()

        def emit(op, path, value):
            session._rt.wrote(session, len(path) + len(value or b""))
            o = pb.Delta.DELETE if op == DELETE else pb.Delta.SET
            self.coll.add(o, path, value)
            if self.journal is not None:
                self.journal.note(o, path, value)
            ck = self.ck
            if ck.log is not None:
                ck.log.note(o, path, value)
            if not ck.dirty:
                session._rt._ck.page_changed(self)

        self.tree = Tree(emit, self._room)

    def _room(self, delta):
        """Refuses a write that would take the page's state, or its
        person's pages here, past their bounds (runtime.state_bounds)."""
        self.session._rt.room(self, delta)

    def gateway(self):
        """The AI gateway client that charges the page's person."""
        return self.session.gateway()

    def subscribe(self, *tables):
        """Makes the page receive the changes of tables (the app's
        on_table_change runs for each, in the person's mailbox).
        Subscriptions travel with the page when its person moves. Raises
        BadTable for a name stickyd cannot carry."""
        tables = check_tables(tables)
        self._tables.update(tables)
        self.session._rt._subs.add(self, tables)
        self.session._rt._ck.page_changed(self)  # subscriptions are in its checkpoint

    def unsubscribe(self, *tables):
        """Stops the page receiving the changes of tables."""
        self._tables.difference_update(tables)
        self.session._rt._subs.remove(self, tables)
        self.session._rt._ck.page_changed(self)

    def tables(self):
        """The tables the page subscribes to, sorted."""
        return sorted(self._tables)

    def cached(self, key, tables, compute):
        """The value cached in the page under key, computed by compute() and
        cached if there is none. The value is marked with tables (a list;
        the page subscribes to them): when one of them changes, the value is
        deleted from the tree (a delta the page receives like any other),
        and the next call computes it afresh. It lives at "cache/<key>" in
        the tree, so it is also what the page shows; compute must return
        JSON-like data. A person's arrival from a move invalidates it too:
        the tables may have changed on the way (tables.py)."""
        if not isinstance(key, str) or not key or "/" in key:
            raise ValueError("cache key %r: want a non-empty name without /" % (key,))
        path = CACHE_PREFIX + key
        v = self.tree.get(path)
        if v is not None:
            return v
        tables = check_tables(tables)
        self.subscribe(*tables)
        self.tree.set(path, compute())
        self._marks[path] = tables
        return self.tree.get(path)
