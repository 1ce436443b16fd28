"""The global store (docs/data.md): the Go SDK's Get and Acquire
(plugins/worker/store.go) in Python, with the same calls on the channel.

One tree shared by every worker of the pool; its master lives in the
supervisor (the raft leader writes it, every server keeps a replica). A
worker reads it with a StoreGet call to its host (get); read-modify-write
goes through a grant (acquire): an ordered, all-or-nothing hold on a set of
paths that carries the master's content for them, which the holder commits
or releases. A grant ends without commit when its lease runs out, when its
worker's process ends, or when its person moves away; a commit under such a
grant is refused with StaleGrant, and nothing is written.

Each call is made from the thread serving the request, the page message or
the table change (the person's mailbox waits with it) and waits for the
host's answer. Paths are slash-separated ("customers/42/name"); values are
JSON-like.
"""

import json

from . import session as _session
from . import stickyd_pb2 as pb
from .runtime import HostError, code_name
from .tree import dumps, normalize

# Defaults of acquire (seconds), the Go SDK's DefaultLease and
# DefaultGrantWait.
DEFAULT_LEASE = 10.0
DEFAULT_GRANT_WAIT = 30.0


class StoreError(Exception):
    """The store refused a call, or the host did not answer it: code is the
    channel's error code (stickyd_pb2.Error.UNAVAILABLE: retry later;
    BAD_REQUEST: a bad path or value, a write outside the grant...)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


class StaleGrant(StoreError):
    """A commit under a grant the store no longer holds (its lease ran out,
    it was released, its worker or person left; the Go SDK's
    ErrStaleGrant): nothing was written. Acquire again and redo the
    change."""


def _serving(what):
    """The connection being served, whose worker makes the call."""
    s = _session.current()
    if s is None:
        raise RuntimeError("%s: not in a stickyd handler" % what)
    return s


def _call(rt, what, **body):
    try:
        return rt.call(**body)
    except HostError as e:
        if e.code == pb.Error.STALE_GRANT:
            raise StaleGrant("%s: grant is no longer held: %s" % (what, e.message), e.code) from None
        raise StoreError("%s: %s: %s" % (what, code_name(e.code), e.message), e.code) from None


def _values(m, what):
    try:
        return {path: json.loads(raw) for path, raw in m.items()}
    except ValueError as e:
        raise StoreError("%s: the host sent a value that is not JSON: %s" % (what, e), pb.Error.INTERNAL) from None


def get(*paths):
    """Reads the global store: every value stored at or under each path, by
    path ({"customers/42/name": "Acme", ...}), from the replica of the
    worker's own agent. It sees every commit this worker made before it,
    and every commit a table change it received was published after (read
    your writes)."""
    s = _serving("reading the store")
    env = _call(s._rt, "reading the store", store_get=pb.StoreGet(paths=paths, min_index=s._rt.store_index))
    s._rt.saw_store_index(env.store_values.index)
    return _values(env.store_values.values, "reading the store")


def acquire(paths, lease=None, wait=None):
    """Waits for a grant on paths (first come, first served: nobody
    overtakes an earlier request on overlapping paths; all the paths or
    none) and returns it with their content. lease (seconds, default
    DEFAULT_LEASE) bounds how long it is held; wait (seconds, default
    DEFAULT_GRANT_WAIT) bounds the wait in the queue, past which StoreError
    (UNAVAILABLE) is raised. The person's mailbox waits with the call."""
    s = _serving("acquiring a grant")
    if isinstance(paths, (str, bytes)):
        raise TypeError("acquiring a grant: want a list of paths, not the %s %r" % (type(paths).__name__, paths))
    if lease is None or lease <= 0:
        lease = DEFAULT_LEASE
    if wait is None or wait <= 0:
        wait = DEFAULT_GRANT_WAIT
    req = pb.GrantAcquire(paths=list(paths), lease_ms=int(lease * 1000), wait_ms=max(int(wait * 1000), 1),
                          user=s.user_key())
    env = _call(s._rt, "acquiring a grant", grant_acquire=req)
    if env.WhichOneof("body") != "grant_reply":
        raise StoreError("acquiring a grant: the host answered %s" % env.WhichOneof("body"), pb.Error.INTERNAL)
    r = env.grant_reply
    return Grant(s._rt, r.id, r.token, _values(r.values, "acquiring a grant"), r.lease_ms / 1000.0)


class Grant:
    """A hold on a set of paths of the global store: id names it, token
    fences it (the store refuses a commit with a token it no longer holds),
    values is the master's content at or under its paths when it was
    granted, lease (seconds) how long it lasts unless committed or
    released. Use it from the handler that acquired it."""

    def __init__(self, rt, id, token, values, lease):
        self._rt = rt
        self.id, self.token, self.values, self.lease = id, token, values, lease
        self._done = False

    def __repr__(self):
        return "Grant(id=%d, token=%d, paths %s)" % (self.id, self.token, sorted(self.values))

    def commit(self, set=None, delete=()):
        """Writes set ({path: JSON-like value}) and deletes the paths of
        delete, all within the grant's paths, atomically, and releases the
        grant. Raises StaleGrant when the store no longer holds it (nothing
        was written)."""
        what = "committing grant %d" % self.id
        if self._done:
            raise StaleGrant("%s: grant is no longer held (already committed or released here)" % what,
                             pb.Error.STALE_GRANT)
        if isinstance(delete, (str, bytes)):
            raise TypeError("%s: delete wants a list of paths, not the %s %r" % (what, type(delete).__name__, delete))
        c = pb.GrantCommit(id=self.id, token=self.token, delete=list(delete))
        for path, v in (set or {}).items():
            try:
                c.set[path] = dumps(normalize(v))
            except (TypeError, ValueError) as e:
                raise type(e)("%s: encoding %r: %s" % (what, path, e)) from None
        env = _call(self._rt, what, grant_commit=c)
        # This worker's reads from now on see the commit.
        self._rt.saw_store_index(env.grant_commit.index)
        self._done = True

    def release(self):
        """Gives the grant back without writing. Releasing twice, or after a
        commit, does nothing."""
        if self._done:
            return
        self._done = True
        _call(self._rt, "releasing grant %d" % self.id, grant_release=pb.GrantRelease(id=self.id))
