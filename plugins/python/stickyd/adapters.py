"""What the adapters for existing sites share (stickyd.django,
stickyd.flask, stickyd.wsgi.identify): naming the person from the site's
own login, the logout rule, and a framework's sessions kept in the
connection's values, with their hand-over when a login sends the
connection to another worker (docs/existing-apps.md).

* The person is named once per connection: identify() calls
  Session.login() only when the name differs from the connection's person.
* A logout (the site says nobody while the connection is someone's) marks
  the connection logged out in its values (LOGGED_OUT, which moves with
  it), and forgets the person (Session.forget(): the browser's next request
  is a newcomer's) when none of their connections here is still logged in.
  While another one is, the person stays and keeps this connection too: the
  maps cannot unbind a connection from its person, and forgetting would log
  the other browsers out. The connection is then anonymous to the site
  only, and joins whoever it logs in as next.
* Sessions live in Session.values under a prefix, one entry per session
  id: {"data": the framework's own encoding, "expiry": unix seconds or
  None}. The values move with the person and are parked with them at a
  stop, so a session survives moves and restarts.
* The hand-over: the frame that logs a connection in is served where the
  connection was; if the person lives on another worker, the front binds
  the connection there and the values written here stay behind. So on that
  frame the session cookie carries the session itself, signed with the
  site's own secret: "ID.TOKEN"; the next request restores it into the
  values of the worker it reaches, if the token is fresh and names that
  request's person, and the cookie goes back to the bare ID.

An adapter never names a person the site did not name (the user, or
nobody), and never restores a hand-over it cannot verify. It holds no lock
of its own under stickyd: a person's frames run one at a time, so a
connection's values are touched by one thread at a time (outside stickyd,
LocalValues' lock is held for one store call).
"""

import hashlib
import logging
import re
import threading
import time

from .session import _NAME_RE
from .tree import Tree

log = logging.getLogger("stickyd")

# UNKNOWN, returned by a function that names the person, says it cannot
# tell on this request: the connection stays whoever it is.
UNKNOWN = object()

# HANDOVER_AGE bounds how old a hand-over token may be when it is restored
# (seconds): the request after a login normally follows at once.
HANDOVER_AGE = 3600
# HANDOVER_MAX bounds the cookie a hand-over makes (browsers keep 4096
# bytes a cookie); a bigger session is not handed over (logged).
HANDOVER_MAX = 3800
SEP = "."  # between the session id and the hand-over token
# LOGGED_OUT is the path of the logout mark in a connection's values.
LOGGED_OUT = "stickyd/logged_out"

_BAD = re.compile(r"[^A-Za-z0-9._@-]")
_warned = set()
_warned_mu = threading.Lock()


def warn_once(key, msg, *args):
    """Logs msg once per process for key."""
    with _warned_mu:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(msg, *args)


def person_name(name):
    """The stickyd person for a site's user name: the name itself when
    stickyd can carry it (1-128 of A-Z a-z 0-9 . _ @ -, not starting with
    ~), else the name with those characters as "_", cut to 100, a dot and
    16 hex digits of its SHA-256 (one person per name; logged once)."""
    name = str(name)
    if _NAME_RE.match(name):  # "~" (ANONYMOUS_PREFIX) is not among its characters
        return name
    safe = _BAD.sub("_", name)[:100] or "user"
    out = safe + "." + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    warn_once(("name", name), "stickyd: user %r is the person %r (the name has characters stickyd does not carry)",
              name, out)
    return out


def identify(s, name, attrs=None):
    """Makes the connection s the person the site calls name: None (or "")
    is nobody, UNKNOWN leaves s as it is. attrs (str to str, at most 16)
    go with the login, which happens only when the person changes."""
    if s is None or name is UNKNOWN:
        return
    if name is None or name == "":
        if s.user:
            log_out(s)
        return
    person = person_name(name)
    if s.values.get(LOGGED_OUT):
        s.values.delete(LOGGED_OUT)
    if s.user != person:
        s.login(person, attrs)


def log_out(s):
    """The logout rule (see the module doc): the connection is marked, and
    the person forgotten when none of their connections here is still
    logged in."""
    if not s.values.get(LOGGED_OUT):
        s.values.set(LOGGED_OUT, True)
    if all(c is s or c.values.get(LOGGED_OUT) for c in s.connections()):
        s.forget()


def split(raw):
    """(id, token) of a session cookie's value; token is "" when there is
    no hand-over."""
    sid, _, token = (raw or "").partition(SEP)
    return sid, token


class TreeSessions:
    """A framework's sessions in a connection's values, under prefix."""

    def __init__(self, prefix):
        self.prefix = prefix

    def _path(self, sid):
        return self.prefix + "/" + sid

    def get(self, values, sid, now=None):
        """The live entry of sid, or None (an expired one is dropped)."""
        if not sid or "/" in sid:
            return None
        e = values.get(self._path(sid))
        if not isinstance(e, dict) or not isinstance(e.get("data"), str):
            return None
        exp = e.get("expiry")
        if exp is not None and exp <= (time.time() if now is None else now):
            values.delete(self._path(sid))
            return None
        return e

    def put(self, values, sid, data, expiry):
        """Stores sid's data (a str) and drops expired entries."""
        self.purge(values)
        values.set(self._path(sid), {"data": data, "expiry": expiry})

    def drop(self, values, sid):
        if sid and "/" not in sid:
            values.delete(self._path(sid))

    def ids(self, values):
        held = values.get(self.prefix)
        return list(held) if isinstance(held, dict) else []

    def purge(self, values, now=None):
        now = time.time() if now is None else now
        for sid in self.ids(values):
            self.get(values, sid, now)

    def handover(self, s, sid, data, expiry, sign):
        """The cookie value for sid on a frame that logs s in: "ID.TOKEN"
        with TOKEN = sign(payload), or the bare id when there is no login
        or the session is too big to carry."""
        person = s.pending_login if s is not None else ""
        if not person:
            return sid
        token = sign({"k": sid, "u": person, "d": data, "e": expiry})
        if len(sid) + 1 + len(token) > HANDOVER_MAX:
            log.warning("stickyd: a session of %d bytes is not handed over at the login of %r; "
                        "if the person lives on another worker the session stays behind", len(data), person)
            return sid
        return sid + SEP + token

    def restore(self, s, values, sid, token, unsign):
        """Restores a handed-over session into values and returns its entry,
        or None: the token must be unsign-able (fresh, signed by the site),
        name sid and the person s is now."""
        try:
            h = unsign(token)
        except Exception:  # bad signature, too old, not ours
            return None
        if not isinstance(h, dict) or h.get("k") != sid or not s.user or h.get("u") != s.user:
            return None
        data, expiry = h.get("d"), h.get("e")
        if not isinstance(data, str) or (expiry is not None and expiry <= time.time()):
            return None
        self.put(values, sid, data, expiry)
        return values.get(self._path(sid))


class LocalValues:
    """Values for requests outside stickyd (a development server, a
    management command): one tree in this process, behind a lock. Nothing
    of it moves."""

    def __init__(self):
        self.tree = Tree()
        self.mu = threading.RLock()


local = LocalValues()
