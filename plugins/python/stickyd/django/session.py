"""A Django session engine that keeps the session in the connection's
values, so it moves with the person and survives restarts with them:

    SESSION_ENGINE = "stickyd.django.session"

Django's own semantics hold (SessionBase: load, save, exists, create,
delete, flush, cycle_key, expiry, SESSION_SERIALIZER, the key in the
SESSION_COOKIE_NAME cookie): only the store differs. A session is one entry
of the connection's values, django/sessions/KEY = {"data": Django's signed
encoding, "expiry": unix seconds}; the browser's cookie names it, as with
the database engine, but the data never leaves the worker except inside the
person's package.

On the response whose request logs the connection in (StickydMiddleware),
the cookie carries the session too, signed with SECRET_KEY ("KEY.TOKEN"):
if the person lives on another worker, the connection joins them there
and the next request restores the session from it (stickyd.adapters).

Outside stickyd (runserver, manage.py shell) sessions are kept in this
process's memory, and logged once as such. clear_expired() has nothing to
do: each connection's expired sessions go when it saves one.
"""

import time

from django.contrib.sessions.backends.base import CreateError, SessionBase, UpdateError
from django.core import signing

from .. import adapters
from ..session import current

SALT = "stickyd.django.session.handover"

_sessions = adapters.TreeSessions("django/sessions")


class _Values:
    """The values the sessions live in: the connection's, or the
    process's own outside stickyd."""

    def __init__(self):
        self.s = current()
        if self.s is not None:
            self.tree = self.s.values
            self.mu = None
        else:
            adapters.warn_once("django-local", "stickyd: a Django session outside stickyd is kept in this "
                               "process's memory only")
            self.tree, self.mu = adapters.local.tree, adapters.local.mu

    def __enter__(self):
        if self.mu is not None:
            self.mu.acquire()
        return self

    def __exit__(self, *exc):
        if self.mu is not None:
            self.mu.release()


def _sign(payload):
    return signing.dumps(payload, salt=SALT, compress=True)


def _unsign(token):
    return signing.loads(token, salt=SALT, max_age=adapters.HANDOVER_AGE)


class SessionStore(SessionBase):
    """Django's session in the connection's values (see the module doc)."""

    @property
    def _sid(self):
        """The session's key without a hand-over token."""
        return adapters.split(self.session_key)[0] if self.session_key else None

    def load(self):
        raw = self.session_key
        sid, token = adapters.split(raw)
        with _Values() as v:
            e = _sessions.get(v.tree, sid)
            if e is None and token and v.s is not None:
                e = _sessions.restore(v.s, v.tree, sid, token, _unsign)
        if e is None:
            self._session_key = None
            return {}
        if token:
            # The cookie goes back to the bare key on this response.
            self._session_key = sid
            self.modified = True
        return self.decode(e["data"])

    def exists(self, session_key):
        sid = adapters.split(session_key)[0]
        with _Values() as v:
            return _sessions.get(v.tree, sid) is not None

    def create(self):
        while True:
            self._session_key = self._get_new_session_key()
            try:
                self.save(must_create=True)
            except CreateError:
                continue  # taken meanwhile: another key
            self.modified = True
            return

    def save(self, must_create=False):
        data = self._get_session(no_load=must_create)  # loading may find no session: a new key then
        if self.session_key is None:
            return self.create()
        sid = self._sid
        data = self.encode(data)
        expiry = time.time() + self.get_expiry_age()
        with _Values() as v:
            held = _sessions.get(v.tree, sid) is not None
            if must_create and held:
                raise CreateError
            if not must_create and not held:
                raise UpdateError  # deleted while this request ran (a logout elsewhere)
            _sessions.put(v.tree, sid, data, expiry)
            self._session_key = _sessions.handover(v.s, sid, data, expiry, _sign)

    def delete(self, session_key=None):
        if session_key is None:
            if self.session_key is None:
                return
            session_key = self.session_key
        with _Values() as v:
            _sessions.drop(v.tree, adapters.split(session_key)[0])

    @classmethod
    def clear_expired(cls):
        """Nothing to do: a connection's expired sessions go when it saves
        one, and a person's connections go with them."""
