"""Maintenance windows (docs/maintenance.md) in the Python SDK: the Go SDK's
Needs and its holds (plugins/worker/maintenance.go), with the same rules.

The app declares which backends (a database, a payment service: any name
the operator also uses, "db-a") its routes and its pages' messages need:

    needs = stickyd.Needs().route("/orders", "db-a").op("order", "db-a", "payments")

(a module attribute, or one of the WSGI callable, as the page hooks are).
While a backend is in maintenance (`stickyd maintenance start db-a`), a
request or message that needs it waits in the person's mailbox, before its
handler runs, until the window ends; then it runs, and the person's later
frames after it, in arrival order. Past the window's max wait it is refused
with MAINTENANCE (HTTP 503 with Retry-After, a WebSocket error with "retry":
true): the handler never ran. Everything that does not need the backend runs
as usual. A freeze of the person (a move, a park) ends the wait at once: the
request, which has not run, is answered MOVED and the front sends it again
to wherever the person is, where it waits again.

A held request holds no thread: its mailbox is parked (its later frames
queue behind it) and taken up again by the thread pool when the wait ends,
as a long-poll is by the timer thread.
"""

import json
import threading
import time
from urllib.parse import unquote, urlsplit

from . import stickyd_pb2 as pb


class Needs:
    """Which backends the site's routes and the pages' messages need, one
    line each (the Go SDK's worker.Needs):

        Needs().route("/orders/", "db-a").op("save", "db-a", "payments")
    """

    def __init__(self):
        self._routes = []  # (prefix, [backend]) in declaration order
        self._ops = {}  # op -> [backend]

    def route(self, prefix, *backends):
        """Declares that requests whose path starts with prefix need
        backends. Several matching prefixes add up."""
        self._routes.append((prefix, list(backends)))
        return self

    def op(self, op, *backends):
        """Declares that page messages whose "op" field is op ({"op":
        "save", ...}) need backends."""
        self._ops.setdefault(op, []).extend(backends)
        return self

    @property
    def has_routes(self):
        return bool(self._routes)

    @property
    def has_ops(self):
        return bool(self._ops)

    def for_path(self, path):
        """The backends a request for path needs."""
        out = []
        for prefix, backends in self._routes:
            if path.startswith(prefix):
                out.extend(backends)
        return out

    def for_message(self, raw):
        """The backends a page message needs, by its "op" field; raw is the
        message's JSON (bytes or str). A message that is not a JSON object,
        or whose op is not a string, needs nothing; as Go's encoding/json
        reads it, the field's name is matched without regard to case."""
        if not self._ops:
            return []
        try:
            m = json.loads(raw)
        except (ValueError, TypeError):
            return []
        op = ""
        if isinstance(m, dict):
            v = m.get("op")
            if "op" not in m:
                for k, val in m.items():
                    if k.lower() == "op":
                        v = val
            if v is not None:
                if not isinstance(v, str):
                    return []
                op = v
        elif m is not None:
            return []
        return list(self._ops.get(op, ()))


def request_path(raw):
    """The path of a frame's request URL, decoded (Go's url.URL.Path)."""
    try:
        return unquote(urlsplit(raw).path)
    except ValueError:
        return raw


def go_duration(seconds):
    """seconds rounded to the millisecond and written as Go's
    time.Duration.String writes it ("450ms", "1.001s", "1m30s")."""
    ms = int(seconds * 1000 + 0.5)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return "%dms" % ms
    h, rem = divmod(ms, 3600000)
    m, rem = divmod(rem, 60000)
    s, frac = divmod(rem, 1000)
    out = "%dh%dm" % (h, m) if h else ("%dm" % m if m else "")
    return out + str(s) + ("." + ("%03d" % frac).rstrip("0") if frac else "") + "s"


class MaintenanceError(Exception):
    """Refuses a request that waited past a window's max wait (code
    MAINTENANCE: retry later; the handler never ran)."""

    code = pb.Error.MAINTENANCE

    def __init__(self, backend, reason, waited):
        self.backend, self.reason, self.waited = backend, reason, waited
        msg = "backend %s is in maintenance" % backend
        if reason:
            msg += " (" + reason + ")"
        super().__init__(msg + "; waited %s, retry later" % go_duration(waited))


# A hold's outcomes besides running its frame (None) and a MaintenanceError.
YIELDED = "yielded"  # its person is being frozen: the request goes with them (MOVED)
STOPPING = "stopping"  # the worker stops


class Hold:
    """One request waiting in its person's mailbox for backends to leave
    maintenance. The runtime fills what it needs to take the frame up
    again; outcome is set when the wait ends."""

    __slots__ = ("user", "backends", "start", "counted", "first", "deadline", "timer", "armed", "done", "outcome",
                 "env", "u", "turn", "began")

    def __init__(self, user, backends):
        self.user = user  # the mailbox's user key; "" for a new connection (no freeze to yield to)
        self.backends = backends
        self.start = time.monotonic()
        self.counted = []  # the backends it is counted as waiting on
        self.first = None  # the MaintenanceBackend whose max wait ends first
        self.deadline = 0.0
        self.timer = None
        self.armed = 0  # numbers the timers: one that fires after a re-arm does nothing
        self.done = False
        self.outcome = None
        self.env = self.u = None
        self.turn = 0
        self.began = self.start


class Maintenance:
    """The backends in maintenance as the host last told this worker, and
    the requests waiting on them. on_end(hold) takes up a hold whose wait
    ended (its outcome set); it is called outside the lock, from the
    thread that ended the wait (the channel's reader, the timer thread),
    and must not block."""

    def __init__(self, sched, on_end):
        self._sched = sched
        self._on_end = on_end
        self._mu = threading.Lock()  # guards everything below
        self._version = 0
        self._active = {}  # backend name -> MaintenanceBackend
        self._holds = set()
        self._waiting = {}  # backend -> requests waiting on it now
        self._timed_out = {}  # backend -> requests refused since the worker began
        # The people whose freeze is on its way through their mailbox: their
        # held requests yield to it, until it runs (froze).
        self._yielding = set()
        self._closed = False
        # open counts the backends in maintenance: a message is looked into
        # for what it needs only while some window is open.
        self.open = 0

    def set(self, notice):
        """Takes the host's notice (the whole set), unless an older one
        arrives late; the holds look again at what they wait on."""
        ended = []
        with self._mu:
            if notice.version != 0 and notice.version < self._version:
                return
            self._version = notice.version
            self._active = {b.name: b for b in notice.backends}
            self.open = len(self._active)
            for h in list(self._holds):
                if not self._arm_locked(h):
                    self._end_locked(h, None)
                    ended.append(h)
        for h in ended:
            self._on_end(h)

    def needed(self, backends):
        """Whether some of backends is in maintenance now."""
        if not backends or not self.open:
            return False
        with self._mu:
            return any(b in self._active for b in backends)

    def hold(self, h):
        """Starts h's wait: True when it waits (on_end takes it up later);
        False when it does not, with its outcome set: None (the window
        ended meanwhile: run it now) or YIELDED."""
        with self._mu:
            if self._closed:
                h.outcome = STOPPING
                return False
            if h.user and h.user in self._yielding:
                h.outcome = YIELDED
                return False
            if not self._arm_locked(h):
                h.outcome = None
                return False
            self._holds.add(h)
            return True

    def _arm_locked(self, h):
        """Counts h as waiting on its needed backends in maintenance and
        sets its deadline: the max wait of the windows it waits on, counted
        from when it began to wait. False when none is in maintenance."""
        self._uncount_locked(h)
        first, deadline = None, 0.0
        for b in h.backends:
            mb = self._active.get(b)
            if mb is None or b in h.counted:
                continue
            h.counted.append(b)
            self._waiting[b] = self._waiting.get(b, 0) + 1
            d = h.start + mb.max_wait_ms / 1000.0
            if first is None or d < deadline:
                first, deadline = mb, d
        if first is None:
            return False
        if h.timer is None or deadline != h.deadline:
            if h.timer is not None:
                h.timer.cancel()
            h.armed += 1
            armed = h.armed
            h.timer = self._sched.after(max(0.0, deadline - time.monotonic()), lambda: self._expire(h, armed))
        h.first, h.deadline = first, deadline
        return True

    def _uncount_locked(self, h):
        for b in h.counted:
            n = self._waiting.get(b, 0) - 1
            if n <= 0:
                self._waiting.pop(b, None)
            else:
                self._waiting[b] = n
        h.counted = []

    def _end_locked(self, h, outcome):
        self._uncount_locked(h)
        self._holds.discard(h)
        if h.timer is not None:
            h.timer.cancel()
        h.done, h.outcome = True, outcome

    def _expire(self, h, armed):
        with self._mu:
            if h.done or h.armed != armed:
                return  # ended, or re-armed meanwhile
            waited = time.monotonic() - h.start
            self._timed_out[h.first.name] = self._timed_out.get(h.first.name, 0) + 1
            self._end_locked(h, MaintenanceError(h.first.name, h.first.reason, waited))
        self._on_end(h)

    def freezing(self, user):
        """A freeze of user is on its way through their mailbox: their held
        requests yield to it (they are what it would wait for), now and
        until it runs."""
        ended = []
        with self._mu:
            self._yielding.add(user)
            for h in list(self._holds):
                if h.user == user:
                    self._end_locked(h, YIELDED)
                    ended.append(h)
        for h in ended:
            self._on_end(h)

    def froze(self, user):
        """user's freeze ran (or they were forgotten): their requests wait
        again, if they come back."""
        with self._mu:
            self._yielding.discard(user)

    def close(self):
        """The worker stops: the holds end (outcome STOPPING), returned for
        the runtime to answer; no new one waits."""
        with self._mu:
            self._closed = True
            holds = list(self._holds)
            for h in holds:
                self._end_locked(h, STOPPING)
        return holds

    def report(self, r):
        """Fills a probe's maintenance counts."""
        with self._mu:
            for k, v in self._waiting.items():
                r.maintenance_waiting[k] = v
            for k, v in self._timed_out.items():
                r.maintenance_timed_out[k] = v
