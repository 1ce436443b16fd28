"""The worker: its people and their mailboxes, on one channel. The same
contract as the Go SDK (plugins/worker/runtime.go, move.go):

* Frames of one person run one at a time, in arrival order, in that
  person's mailbox, on the app's thread pool (never on the channel's
  reader). A new connection's first request runs beside the mailboxes: it
  has no state yet to order against.
* Every frame carries the person's epoch: one older than the worker knows,
  or any frame of a frozen person, is refused with MOVED (it never ran).
* Freeze runs in the mailbox after what was queued before it and hands the
  person over as a UserPackage (the protobuf every SDK reads); Wake installs
  one; Thaw undoes a freeze whose move rolled back; Evict forgets a person
  whose move committed.
* The version rule: a woken page whose kind this build does not know, or
  whose schema version is outside [oldest, version], restarts clean with a
  notice instead of being guessed at.
* A site response whose body is still running STREAM_AFTER after it began
  is answered early and streamed (wsgi.py, streams.py): its thread produces
  the rest while the person's mailbox goes on in another thread, and the
  front reads the rest with HTTPRead frames, run beside the mailboxes.
* Table changes run in the mailboxes of the people whose pages subscribe,
  and the worker tells the host its set of subscribed tables after each
  mailbox item that changed it (tables.py). The app's calls to its host
  (the global store: store.py) are made from the thread that serves it and
  wait for their answer, which the channel's reader routes by id.
"""

import collections
import json
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from . import stickyd_pb2 as pb
from . import usage, wsgi
from .collector import Scheduler
from . import chunks
from . import precopy as precopies
from .checkpoint import NOTICE_RESTORED, Checkpoints, restore as restore_checkpoint
from .maintenance import STOPPING, YIELDED, Hold, Maintenance, MaintenanceError, Needs, request_path
from .streams import Streams
from .session import ANONYMOUS_PREFIX, Page, Session, _Serving, random_name
from .tree import StateTooLarge
from .tables import Subscriptions, TableChange, check_tables, decode_data, encode_data

PACKAGE_FORMAT = 1  # the UserPackage format this SDK writes and reads
MAX_PULL_WAIT = 60.0
# MAX_ANSWERED is how many of a page's recent answers are remembered by
# msg_id (plugins/worker/answered.go keeps as many).
MAX_ANSWERED = 64
# How long an evicted person's fence stays: far longer than any frame waits.
TOMBSTONE_TTL = 120.0
# CALL_WAIT bounds how long a call to the host waits for its answer
# (seconds): the host answers a store call within 2 minutes, and 30 s more
# when it withdraws an acquire whose wait ran out (internal/host/storecalls.go).
CALL_WAIT = 160.0
# The memory of people who left goes back at most once per RELEASE_EVERY,
# RELEASE_MIN after they left (seconds; the Go SDK's releaser).
RELEASE_EVERY = 10.0
RELEASE_MIN = 1.0

NOTICE_LOST = "This page restarted clean: the worker that held its state is gone."
NOTICE_CHANGED = "This page was reset because the application changed."



# The page bounds' defaults, as the Go SDK's (worker.DefaultMaxPageBytes...).
DEFAULT_MAX_PAGE_BYTES = 256 << 20
DEFAULT_MAX_PERSON_BYTES = 1 << 30
DEFAULT_MAX_PAGES_PER_CONN = 100
DEFAULT_MAX_PAGES_PER_PERSON = 500

class Refused(Exception):
    """Raised by a page's message handler (or open_page) to refuse: the
    page is shown the message. Any other exception is an application error.

    code is a short word the page's code switches on ("sold_out"; empty is
    "refused"); retry says the same request may succeed later. The page's
    promise (client.js) rejects with both, as the Go SDK's worker.Refusal.
    The message ran: the refusal is its answer, remembered by its msg_id."""

    def __init__(self, message="", code="", retry=False):
        super().__init__(message)
        self.code = code
        self.retry = retry


class _Bad(Exception):
    code = pb.Error.BAD_REQUEST


class _Taken(_Bad):
    kind = "conn_taken"  # protocol.KindConnTaken


class _Moved(Exception):
    code = pb.Error.MOVED

    def __init__(self, user, epoch):
        super().__init__("user %r has moved (epoch %d here)" % (user, epoch))


class _Stopping(Exception):
    """A held frame's answer when the worker stops (the Go SDK answers its
    context's end, INTERNAL)."""

    code = pb.Error.INTERNAL

    def __init__(self):
        super().__init__("the worker is stopping")


class _NeedsHold(Exception):
    """The frame needs a backend in maintenance: it waits (maintenance.py)."""

    def __init__(self, user, backends):
        super().__init__(user, backends)
        self.user, self.backends = user, backends


class HostError(Exception):
    """A call to the host answered with an Error envelope (code, message,
    and the refusing subsystem's kind, if it said one), or not answered:
    the channel closed, or the wait passed (code UNAVAILABLE, kind "").
    store.py and gateway.py turn it into the app's exceptions."""

    def __init__(self, code, message, kind=""):
        super().__init__("%s: %s" % (code_name(code), message))
        self.code, self.message, self.kind = code, message, kind


def answer_of(c):
    """The reply envelope of a settled _Call; HostError for an Error answer
    or a channel that closed first."""
    if c.env is None:
        raise HostError(pb.Error.UNAVAILABLE, "the channel closed before the host answered")
    if c.env.WhichOneof("body") == "error":
        raise HostError(c.env.error.code, c.env.error.message, c.env.error.kind)
    return c.env


def code_name(code):
    """The name of an Error code ("STALE_GRANT"), or its number when this
    SDK does not know it (a newer host's)."""
    try:
        return pb.Error.Code.Name(code)
    except ValueError:
        return str(code)


class _Call:
    """A call to the host waiting for its answer (env: None when the
    channel closed first); wake, if set, is called once it is settled (a
    gateway stream waits on its own condition)."""

    __slots__ = ("done", "env", "wake")

    def __init__(self, wake=None):
        self.done = threading.Event()
        self.env = None
        self.wake = wake

    def settle(self, env):
        self.env = env
        self.done.set()
        if self.wake is not None:
            self.wake()


class Hooks:
    """What the app provides besides its WSGI callable, all optional:
    open_page(page), message(page, msg) -> answer, close_page(page),
    on_table_change(page, change) (tables.py; the Go SDK's TableWatcher),
    schemas {kind: version | (version, oldest)}, and needs, a Needs saying
    which backends its routes and messages need (maintenance.py)."""

    def __init__(self, open_page=None, message=None, close_page=None, schemas=None, on_table_change=None,
                 needs=None):
        if needs is not None and not isinstance(needs, Needs):
            raise TypeError("needs must be a stickyd.Needs, not %s" % type(needs).__name__)
        self.open_page = open_page
        self.message = message
        self.close_page = close_page
        self.schemas = schemas
        self.on_table_change = on_table_change
        self.needs = needs

    def schema(self, kind):
        """(version, oldest, known) for a page kind; a bare version reads
        only itself."""
        if self.schemas is None:
            return 0, 0, True
        v = self.schemas.get(kind)
        if v is None:
            return 0, 0, False
        if isinstance(v, (tuple, list)):
            return int(v[0]), int(v[1]), True
        return int(v), int(v), True


class _Account:
    __slots__ = ("busy", "frames", "state_bytes")

    def __init__(self):
        self.busy = 0.0
        self.frames = 0
        self.state_bytes = 0


class _User:
    __slots__ = ("key", "queue", "running", "turn", "in_frame")

    def __init__(self, key):
        self.key = key
        self.queue = collections.deque()
        self.running = False
        # Set while the mailbox runs one of the person's site requests: a
        # freeze waits longer for it (_FreezeWatch); a page's message is
        # meant to be quick.
        self.in_frame = False
        # The turn of the thread running the mailbox: a frame whose response
        # became a stream hands the mailbox to a new turn (_hand_over).
        self.turn = 0


# FREEZE_WATCH_TICK is how often an overdue freeze looks again whether the
# person's frame still runs (seconds).
FREEZE_WATCH_TICK = 0.05


class _FreezeWatch:
    """A freeze waiting in a mailbox, with its bounds (seconds)."""

    def __init__(self, id, user, wait, request_wait):
        self.id, self.user, self.wait, self.request_wait = id, user, wait, request_wait
        self.since = time.monotonic()
        self.timer = None
        self.begun = False  # the mailbox runs it (guarded by Runtime._mu)
        self.answered = False  # refused for being late


def _user_of(key):
    return "" if key.startswith(ANONYMOUS_PREFIX) else key


class Runtime:
    """One worker. send(envelope) writes on the channel (any thread);
    on_shutdown() is called when the host says Shutdown. At most max_streams
    streamed responses produce at once (default: half the threads, at least
    one), so that mailboxes keep threads."""

    def __init__(self, app, hooks, send, log, name="", version="", threads=8, on_shutdown=None, max_streams=None):
        self.app = app
        self.hooks = hooks
        self.name = name
        self.version = version
        self.worker_id = ""
        # The page bounds (the Go SDK's defaults; the group's limits, from
        # the host's HelloAck, over them: set_limits); 0 is no bound.
        self.max_page_bytes, self.max_person_bytes = DEFAULT_MAX_PAGE_BYTES, DEFAULT_MAX_PERSON_BYTES
        self.max_pages_per_conn, self.max_pages_per_person = DEFAULT_MAX_PAGES_PER_CONN, DEFAULT_MAX_PAGES_PER_PERSON
        self._state_refused = 0
        self._pages_refused = 0
        self._send = send
        self._log = log
        self._on_shutdown = on_shutdown
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="stickyd-app")
        self._sched = Scheduler()
        if max_streams is None:
            max_streams = max(1, threads // 2)
        self._streams = Streams(self._sched, log, max_streams)
        self._mu = threading.Lock()  # guards everything below
        self._users = {}  # user key -> _User, while their mailbox has work
        self._conns = {}  # connection name -> Session
        self._by_user = {}  # user key -> set of Session
        self._epochs = {}  # newest epoch seen per user key
        self._frozen = set()  # users handed over by a Freeze
        # When each person evicted here left: their fence (epoch, frozen)
        # goes TOMBSTONE_TTL later; a forgotten person's at once.
        self._evicted = {}
        self._pages = 0
        self._frames = 0
        # What each person consumed here since they arrived, for the probes
        # (the supervisor tells who is heavy on a saturated worker): the
        # accounts changed since the last probe, and who left.
        self._freeze_watches = {}  # envelope id -> _FreezeWatch
        self._accounts = {}  # user key -> _Account, while they have a connection
        self._dirty = set()
        self._left = []
        # The pages subscribed to each table (tables.py).
        self._subs = Subscriptions()
        # The calls to the host waiting for their answer, by id: each holds
        # the thread that made it, so there are at most as many as threads
        # serve the app. Their ids are the worker's own (a reply is told
        # from a request by its reply flag).
        self._calls = {}
        # The gateway streams' chunk takers, by their call's id (gateway.py).
        self._chunks = {}
        self._next_call = 1  # the Hello was 1
        self._closed = False
        # The backends in maintenance and the requests held for them
        # (maintenance.py): a held request parks its mailbox.
        self._maint = Maintenance(self._sched, self._unhold)
        # What changed since the last checkpoint (checkpoint.py).
        self._ck = Checkpoints(self)
        # The newest store index this worker knows (its commits and reads,
        # the table changes it received): its reads wait for it.
        self.store_index = 0
        # Whether the host reads envelopes sent together (HelloAck.batches),
        # and the answers a thread gathers for one (_out).
        self.batches = False
        self._together = threading.local()
        # The precopies staged here for wakes to come (precopy.py).
        self._staged = precopies.Staging(PACKAGE_FORMAT)
        # The memory people left behind goes back soon (_released).
        self._release_due = False
        self._last_release = float("-inf")

    # -- the channel --------------------------------------------------------

    def handle(self, env):
        """Routes one envelope from the host without blocking: called by the
        channel's reader, in arrival order."""
        if env.reply:
            self._answered(env)
            return
        body = env.WhichOneof("body")
        if body == "frame":
            with self._mu:
                self._frames += 1
            if env.frame.WhichOneof("kind") == "read":
                self._read(env)
            elif not env.frame.conn:
                self._submit(self._run_frame, env)
            else:
                self._enqueue(env.frame.user, env)
        elif body == "freeze":
            self._watch_freeze(env)
            # The person's held requests go with them: they are what the
            # freeze would wait for.
            self._maint.freezing(env.freeze.user)
            self._enqueue(env.freeze.user, env)
        elif body == "thaw":
            self._enqueue(env.thaw.user, env)
        elif body == "precopy":
            if precopies.person_size(self, env.precopy.user) < precopies.PRECOPY_MIN:
                self._reply(env.id, precopied=pb.Precopied(small=True))
            else:
                self._enqueue(env.precopy.user, env)
        elif body == "stage":
            threading.Thread(target=self._stage, args=(env,), name="stickyd-stage", daemon=True).start()
        elif body == "checkpoint":
            # It waits for mailboxes: never on the reader.
            threading.Thread(target=self._ck.answer, args=(env.id, env.checkpoint), name="stickyd-checkpoint",
                             daemon=True).start()
        elif body == "wake":
            self._enqueue(env.wake.user, env)
        elif body == "evict":
            self._evict(env.evict.user, env.evict.forget)
            self._reply(env.id, evict=pb.Evict())
        elif body == "table_change":
            self._deliver_table(env.table_change)
            if env.id:
                self._reply(env.id, table_change=pb.TableChange())
        elif body == "maintenance":
            self._maint.set(env.maintenance)
            if env.id:
                self._reply(env.id, maintenance=pb.Maintenance())
        elif body == "probe":
            self._reply(env.id, probe_reply=self._probe())
        elif body == "shutdown":
            self._log.info("shutting down", reason=env.shutdown.reason)
            self._reply(env.id, shutdown=pb.Shutdown())
            if self._on_shutdown is not None:
                self._on_shutdown()
        elif body == "gateway_chunk":
            self._chunk(env.gateway_chunk)
        elif env.id:
            self._reply_error(env.id, pb.Error.BAD_REQUEST, "worker does not handle %s" % body)

    def close(self):
        """Stops taking work; what runs finishes on its own, and the calls
        waiting for the host fail."""
        with self._mu:
            self._closed = True
            calls, self._calls = self._calls, {}
            self._chunks = {}
        for c in calls.values():
            c.settle(None)
        self._maint_closed(self._maint.close())
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._streams.close()
        self._sched.stop()

    def call(self, timeout=CALL_WAIT, **body):
        """Sends the host a request and waits, on the calling thread, for
        its answer: the reply envelope. Raises HostError for an Error
        answer, a closed channel, or no answer within timeout (seconds)."""
        id, c = self.start_call(body)
        if not c.done.wait(timeout):
            self.forget_call(id)
            raise HostError(pb.Error.UNAVAILABLE, "the host did not answer within %gs" % timeout)
        return answer_of(c)

    def start_call(self, body, chunks=None, wake=None):
        """Sends the host the request body ({field: message}) and returns
        its id and its _Call, settled when the answer comes. chunks, if
        given, takes the GatewayChunk notices that name the call, on the
        channel's reader, every one before the answer; wake is the _Call's."""
        c = _Call(wake)
        with self._mu:
            if self._closed:
                raise HostError(pb.Error.UNAVAILABLE, "the worker is stopping")
            self._next_call += 1
            id = self._next_call
            self._calls[id] = c
            if chunks is not None:
                # Known before the call leaves: its first chunk cannot
                # arrive before it.
                self._chunks[id] = chunks
        self._send(pb.Envelope(id=id, **body))
        return id, c

    def forget_call(self, id):
        """Gives up a call: its answer and its chunks, if they come, are
        dropped."""
        with self._mu:
            self._calls.pop(id, None)
            self._chunks.pop(id, None)

    def _answered(self, env):
        """Hands a reply to the call waiting for it; one nobody waits for
        (given up, or a call this SDK does not make) is dropped. No chunk
        of the call comes after its answer."""
        with self._mu:
            c = self._calls.pop(env.id, None)
            self._chunks.pop(env.id, None)
        if c is not None:
            c.settle(env)

    def _chunk(self, ch):
        """Hands a gateway stream's chunk to its stream; one of a stream
        given up is dropped. Called on the channel's reader: it never waits
        for the app."""
        with self._mu:
            take = self._chunks.get(ch.call_id)
        if take is not None:
            take(ch)

    def _reply(self, id, **body):
        self._out(pb.Envelope(id=id, reply=True, **body))

    def _reply_error(self, id, code, message, kind=""):
        self._out(pb.Envelope(id=id, reply=True, error=pb.Error(code=code, message=message, kind=kind)))

    def _out(self, env):
        """Sends an answer, or keeps it for the batch this thread gathers
        (_run_frame: a message's reply and the pulls it woke go together)."""
        held = getattr(self._together, "held", None)
        if held is not None:
            held.append(env)
            return
        self._send(env)

    def _send_together(self, envs):
        """Sends envs in order, in one batch when the host reads them and
        none carries a package or is large."""
        if len(envs) > 1 and self.batches and not any(chunks.package_fields(e) for e in envs):
            carrier = pb.Envelope(batch=envs)
            if carrier.ByteSize() <= chunks.CHUNK_BYTES:
                self._send(carrier)
                return
        for e in envs:
            self._send(e)

    def _submit(self, fn, *args):
        try:
            self._pool.submit(fn, *args)
        except RuntimeError:
            pass  # the worker is stopping

    # -- mailboxes ----------------------------------------------------------

    def _enqueue(self, key, env):
        with self._mu:
            u = self._users.get(key)
            if u is None:
                u = self._users[key] = _User(key)
            u.queue.append(env)
            start = not u.running
            u.running = True
            turn = u.turn
        if start:
            self._submit(self._drain, u, turn)

    def _drain(self, u, turn, hold=None):
        """Runs a mailbox until it is empty; an idle person costs no thread
        and no map entry (their sessions stay). A thread whose frame's
        response became a stream lost its turn: it leaves once the body is
        produced, while the next turn runs the mailbox. A frame held for a
        backend in maintenance parks the mailbox: the thread leaves, the
        person's later frames queue, and _unhold takes the mailbox up again
        with that frame (hold) when its wait ends."""
        while True:
            with self._mu:
                if u.turn != turn:
                    return
                if hold is not None:
                    env = hold.env
                elif not u.queue:
                    u.running = False
                    if self._users.get(u.key) is u:
                        del self._users[u.key]
                    return
                else:
                    env = u.queue.popleft()
                u.in_frame = env.WhichOneof("body") == "frame" and env.frame.WhichOneof("kind") == "http"
            parked = False
            try:
                parked = self._run_envelope(env, u, turn, hold)
            except Exception:  # never lose the mailbox to a bug
                self._log.error("running a mailbox item", traceback=traceback.format_exc())
            finally:
                hold = None
                with self._mu:
                    if u.turn == turn:
                        u.in_frame = False
                self._sync_tables()
            if parked:
                return

    # -- a freeze's own bounds ----------------------------------------------

    def _watch_freeze(self, env):
        """Starts the bounds a freeze carries (Freeze.wait_ms,
        request_wait_ms): past wait_ms in the mailbox it waits on only while
        the person's frame runs in the app, up to request_wait_ms; then it
        is refused UNAVAILABLE at once, and run unanswered when its turn
        comes (as the Go SDK does: plugins/worker/freezewatch.go)."""
        fz = env.freeze
        if not fz.wait_ms:
            return
        w = _FreezeWatch(env.id, fz.user, fz.wait_ms / 1000.0, max(fz.request_wait_ms, fz.wait_ms) / 1000.0)
        with self._mu:
            self._freeze_watches[env.id] = w
        w.timer = self._sched.after(w.wait, lambda: self._freeze_overdue(w))

    def _freeze_overdue(self, w):
        with self._mu:
            if w.begun:
                return
            waited = time.monotonic() - w.since
            u = self._users.get(w.user)
            in_app = u is not None and u.in_frame
            if in_app and waited < w.request_wait:
                w.timer = self._sched.after(FREEZE_WATCH_TICK, lambda: self._freeze_overdue(w))
                return
            w.answered = True
            self._freeze_watches.pop(w.id, None)
        why = "the person's request in the app did not finish" if in_app else "the person's mailbox did not reach it"
        self._reply_error(w.id, pb.Error.UNAVAILABLE, "freezing %r: %s within %.3fs" % (w.user, why, waited))

    def _freeze_begins(self, id):
        """Says the mailbox runs the freeze id; False when it was refused for
        being late."""
        with self._mu:
            w = self._freeze_watches.pop(id, None)
            if w is None:
                return True
            w.begun = True
            w.timer.cancelled = True
            return not w.answered

    def _hand_over(self, u):
        """Lets u's mailbox go on in a new turn: the thread running it now
        goes on producing a streamed body."""
        with self._mu:
            u.turn += 1
            turn = u.turn
            u.in_frame = False  # the stream's body is no frame a freeze waits for
        self._submit(self._drain, u, turn)

    def _run_envelope(self, env, u, turn=0, hold=None):
        """Runs one mailbox item; True when it is a frame held for a backend
        in maintenance (the mailbox parks)."""
        body = env.WhichOneof("body")
        if body == "frame":
            return self._run_frame(env, u, turn, hold)
        elif body == "table_change":
            self._apply_table(u.key, env.table_change)
        elif body == "freeze":
            answer = self._freeze_begins(env.id)
            try:
                fz = self._freeze(env.freeze)
            except Exception as e:
                if answer:
                    self._reply_error(env.id, pb.Error.INTERNAL, "freezing: %s" % e)
                return
            if answer:  # else refused for being late: the mover's thaw follows
                self._reply(env.id, frozen=fz)
        elif body == "thaw":
            self._thaw(env.thaw)
            self._reply(env.id, thaw=pb.Thaw())
        elif body == "precopy":
            precopies.precopy(self, env.id, env.precopy)
        elif body == "checkpoint":
            self._ck.run(u.key, env.id)  # a turn of a checkpoint round
        elif body == "wake":
            try:
                w = self._wake(env.wake)
            except _Moved as e:
                self._reply_error(env.id, pb.Error.MOVED, str(e))
                return
            except precopies.NotStaged as e:
                self._reply_error(env.id, pb.Error.NOT_FOUND, str(e))
                return
            except Exception as e:
                self._reply_error(env.id, pb.Error.BAD_REQUEST, "waking %r: %s" % (env.wake.user, e))
                return
            self._reply(env.id, woken=w)

    # -- frames -------------------------------------------------------------

    def _run_frame(self, env, u=None, turn=0, hold=None):
        """Runs one frame (in u's mailbox, if given) and answers it; a
        page's message is answered in one batch with the pulls its deltas
        woke (the host reads batches), so the front has both at once."""
        if not self.batches or env.frame.WhichOneof("kind") != "message":
            return self._run_one_frame(env, u, turn, hold)
        self._together.held = []
        try:
            return self._run_one_frame(env, u, turn, hold)
        finally:
            held, self._together.held = self._together.held, None
            if held:
                self._send_together(held)

    def _run_one_frame(self, env, u=None, turn=0, hold=None):
        """Runs one frame (in u's mailbox, if given) and answers it. An app
        exception is answered as an internal error for that frame only.
        A frame that needs a backend in maintenance is held before its
        handler runs: it returns True, and _unhold runs it again (hold,
        with the wait's outcome) when the wait ends."""
        began = time.monotonic() if hold is None else hold.began
        try:
            while True:
                try:
                    if hold is not None and hold.outcome is not None:
                        raise self._unheld_error(hold)
                    r = self._frame(env.frame, env.id, u, hold is not None)
                    break
                except _NeedsHold as n:
                    hold = Hold(n.user, n.backends)
                    hold.env, hold.u, hold.turn, hold.began = env, u, turn, began
                    if self._maint.hold(hold):
                        began = None  # charged once, when it is answered
                        return True
                    # Not held after all (the window ended meanwhile, or the
                    # person's freeze is on its way): its outcome now.
        except (_Bad, _Moved, _Stopping, MaintenanceError) as e:
            self._reply_error(env.id, e.code, str(e), getattr(e, "kind", ""))
            return False
        except Exception as e:
            self._log.error("app raised", error=repr(e), traceback=traceback.format_exc())
            self._reply_error(env.id, pb.Error.INTERNAL, "application error: %r" % e)
            return False
        finally:
            if began is not None:
                self._charge(env.frame.user, time.monotonic() - began)
        if r is not None:
            self._send_reply(env.id, r)
            self._after_reply(r)
        return False

    # -- maintenance holds (maintenance.py) ---------------------------------

    def _route_needs(self, url):
        """The backends a request for url needs; the URL is read only when
        the app declared routes."""
        needs = self.hooks.needs
        if needs is None or not needs.has_routes:
            return ()
        return needs.for_path(request_path(url))

    def _check_hold(self, user, backends):
        """Raises _NeedsHold when backends include one in maintenance: the
        frame waits (in user's mailbox; "" for a new connection) before its
        handler runs."""
        if backends and self._maint.needed(backends):
            raise _NeedsHold(user, backends)

    def _unhold(self, h):
        """Takes up a held frame whose wait ended, on the thread pool: it
        runs (or is answered with its outcome), then its mailbox goes on.
        Called by maintenance.py from the reader or the timer thread."""
        if h.u is None:
            self._submit(self._run_frame, h.env, None, 0, h)
        else:
            self._submit(self._drain, h.u, h.turn, h)

    def _unheld_error(self, h):
        """The answer of a held frame whose wait ended without it running."""
        if h.outcome == YIELDED:
            # The person is moving: the request, which has not run, goes
            # with them; the front sends it again to their new home.
            with self._mu:
                epoch = self._epochs.get(h.user, 0)
            return _Moved(h.user, epoch)
        if h.outcome == STOPPING:
            return _Stopping()
        return h.outcome  # a MaintenanceError

    def _maint_closed(self, holds):
        """Answers the frames held when the worker stops."""
        for h in holds:
            self._reply_error(h.env.id, _Stopping.code, str(_Stopping()))

    def _after_reply(self, r):
        """Asks the host to forget the person whose connection called
        Session.forget() during the frame just answered (a notice, after the
        answer, as the Go SDK does)."""
        if not r.HasField("identity") or not r.identity.conn:
            return
        with self._mu:
            s = self._conns.get(r.identity.conn)
            if s is None or not s._forget:
                return
            s._forget, s._forgotten = False, True
            user = s.user_key()
        self._out(pb.Envelope(forget=pb.Forget(user=user)))

    def _charge(self, key, seconds):
        """Records one handled frame of a person who still has an account."""
        with self._mu:
            a = self._accounts.get(key)
            if a is not None:
                a.busy += seconds
                a.frames += 1
                self._dirty.add(key)

    def wrote(self, s, n):
        """Records n bytes written into a page tree of s's person."""
        key = s.user_key()
        with self._mu:
            a = self._accounts.get(key)
            if a is not None:
                a.state_bytes += n
                self._dirty.add(key)

    def _send_reply(self, id, r):
        r.worker_id = self.worker_id
        self._reply(id, frame_reply=r)

    def _frame(self, f, id, u, waited=False):
        kind = f.WhichOneof("kind")
        if not f.conn:
            if kind != "http":
                raise _Bad("a %s frame needs a connection" % kind)
            if not waited:
                self._check_hold("", self._route_needs(f.http.url))
            return self._new_connection(f, id)
        if kind == "release":
            self._release(f.conn)
            return pb.FrameReply()
        self._fence(f)
        s = self._session(f)
        if not waited:
            if kind == "http":
                self._check_hold(f.user, self._route_needs(f.http.url))
            elif kind == "message" and self._maint.open and self.hooks.needs is not None:
                # A message is looked into for what it needs only while a
                # window is open: one that arrives before the window's
                # notice is not held either way.
                self._check_hold(f.user, self.hooks.needs.for_message(f.message.data))
        with _Serving(s):
            if kind == "http":
                return self._serve_http(s, f.http, id, u, lambda resp: self._http_reply(s, resp))
            if kind == "open":
                return self._open(s, f.open)
            if kind == "message":
                return self._message(s, f.message)
            if kind == "pull":
                return self._pull(s, f.pull, id)
            if kind == "close":
                return self._close(s, f.close.page)
        raise _Bad("unknown frame kind %s" % kind)

    def _serve_http(self, s, req, id, u, finish):
        """Runs the site on req and returns finish(response), the frame's
        reply; or None when the response became a stream: finish(head) was
        then the reply, sent early (_early)."""
        with _Serving(s):
            resp = wsgi.call(self.app, wsgi.environ(req, s), self._streams, self._early(id, u, finish))
        return None if resp is None else finish(resp)

    def _early(self, id, u, finish):
        """The answer(head) of a response that becomes a stream, called on
        the Scheduler's thread while the body runs on: it sends finish(head)
        as the frame's reply (the identity is what the request declared
        before its body blocked), then hands u's mailbox over, since the
        body's thread is the stream's producer from now on. False when the
        frame was answered with an error instead."""

        def answer(head):
            try:
                r = finish(head)
            except (_Bad, _Moved) as e:
                self._reply_error(id, e.code, str(e), getattr(e, "kind", ""))
                ok = False
            except Exception as e:
                self._log.error("answering a streamed response", error=repr(e), traceback=traceback.format_exc())
                self._reply_error(id, pb.Error.INTERNAL, "application error: %r" % e)
                ok = False
            else:
                self._send_reply(id, r)
                self._after_reply(r)
                ok = True
            if u is not None:
                self._hand_over(u)
            return ok

        return answer

    def _read(self, env):
        """Answers an HTTPRead on the channel's reader: it never blocks (a
        read that waits is answered by the producer or a timer)."""
        rd = env.frame.read

        def reply(body):
            self._send_reply(env.id, pb.FrameReply(body=body))

        if not self._streams.read(rd.stream, rd.wait_ms / 1000.0, rd.cancel, reply):
            self._reply_error(env.id, pb.Error.NOT_FOUND, "stream %d is not here (ended, canceled or idle)" % rd.stream)

    def _new_connection(self, f, id):
        # The connection has a name from the start, so the site can show it
        # while serving the first request; name_connection replaces it.
        s = Session(self, random_name(), "", is_new=True)
        return self._serve_http(s, f.http, id, None, lambda resp: self._named(s, f.http, resp))

    def _named(self, s, req, resp):
        """The reply to a new connection's first request: from now on, the
        connection is this worker's under its name; or, for a request that
        names nobody, an answer with no identity (no cookie, nothing in the
        maps, nothing here)."""
        s._is_new = False
        if s.leaves_no_trace(req.method, req.url, resp.status):
            return pb.FrameReply(http=resp)
        with self._mu:
            if s.conn in self._conns:
                # Named after a connection this worker holds: the newcomer
                # would take its person. The front answers 409.
                raise _Taken("connection %r: the site named this new connection after one that exists" % s.conn)
            self._add_conn_locked(s)
        return self._http_reply(s, resp)

    def _http_reply(self, s, resp):
        r = pb.FrameReply(http=resp)
        r.identity.CopyFrom(self._identity(s))
        return r

    def _identity(self, s):
        """Applies a login declared during the frame and says who the
        connection is; the attributes go only with the frame that logged in."""
        attrs = None
        if s._login:
            attrs, s._attrs = s._attrs, None
            with self._mu:
                if self._conns.get(s.conn) is s:
                    self._set_user_locked(s, s._login)
                else:
                    s._user = s._login  # not registered yet: a new connection
                s._login = ""
        return pb.Identity(conn=s.conn, user=s._user, attributes=attrs or {})

    def _session(self, f):
        with self._mu:
            s = self._conns.get(f.conn)
            if s is not None:
                self._set_user_locked(s, _user_of(f.user))
                return s
            s = Session(self, f.conn, _user_of(f.user))
            self._add_conn_locked(s)
            return s

    def _add_conn_locked(self, s):
        old = self._conns.get(s.conn)
        if old is not None:
            self._drop_conn_locked(old)
        self._conns[s.conn] = s
        k = s.user_key()
        self._by_user.setdefault(k, set()).add(s)
        if k not in self._accounts:
            self._accounts[k] = _Account()
        self._dirty.add(k)

    def _drop_conn_locked(self, s):
        """Forgets a connection, and its pages' subscriptions (the pages
        keep their tables: a connection registered again subscribes them
        again)."""
        for p in s.pages.values():
            self._subs.remove(p, p._tables)
        if self._conns.get(s.conn) is s:
            del self._conns[s.conn]
        k = s.user_key()
        ss = self._by_user.get(k)
        if ss is not None:
            ss.discard(s)
            if not ss:
                del self._by_user[k]
                # The person's last connection here: their totals go.
                self._accounts.pop(k, None)
                self._dirty.discard(k)
                self._left.append(k)

    def connections_of(self, key):
        """The connections (Session) this worker holds of the person key, by name."""
        with self._mu:
            return sorted(self._by_user.get(key, ()), key=lambda s: s.conn)

    def _set_user_locked(self, s, user):
        if s._user == user:
            return
        self._drop_conn_locked(s)
        s._user = user
        self._add_conn_locked(s)
        self._ck.changed_user(s.user_key())  # its pieces go under the new key
        # The connection's pages stay: so do their subscriptions.
        for p in s.pages.values():
            self._subs.add(p, p._tables)

    def _count_pages_locked(self, s, n):
        """Counts n pages opened (closed, n < 0) on s, for the worker and
        for the account of its person."""
        self._pages += n
        k = s.user_key()
        if k in self._accounts:
            self._dirty.add(k)

    def _release(self, conn):
        with self._mu:
            s = self._conns.get(conn)
            if s is None:
                return
            self._drop_conn_locked(s)
            self._count_pages_locked(s, -len(s.pages))
        self._ck.conn_gone(s)
        for p in s.pages.values():
            p.coll.cancel()

    def set_limits(self, limits):
        """Applies the group's bounds (WorkerLimits): a value set replaces
        the default, a negative one means no bound."""
        def pick(v, cur):
            if v == 0:
                return cur
            return 0 if v < 0 else v
        self.max_page_bytes = pick(limits.max_page_bytes, self.max_page_bytes)
        self.max_person_bytes = pick(limits.max_person_bytes, self.max_person_bytes)
        self.max_pages_per_conn = pick(limits.max_pages_per_conn, self.max_pages_per_conn)
        self.max_pages_per_person = pick(limits.max_pages_per_person, self.max_pages_per_person)

    def room(self, page, delta):
        """Refuses (StateTooLarge) a write of delta more bytes into page's
        tree past the page's or its person's bound. It runs in the person's
        mailbox, so their other pages are still."""
        size = page.tree.size + delta
        if self.max_page_bytes and size > self.max_page_bytes:
            with self._mu:
                self._state_refused += 1
            raise StateTooLarge("state too large: the page's state would be %d bytes; at most %d are allowed per page"
                                % (size, self.max_page_bytes))
        if not self.max_person_bytes:
            return
        s = page.session
        with self._mu:
            sessions = set(self._by_user.get(s.user_key(), ())) | {s}
            total = delta + sum(p.tree.size for c in sessions for p in c.pages.values())
            if total > self.max_person_bytes:
                self._state_refused += 1
                refused = True
            else:
                refused = False
        if refused:
            raise StateTooLarge("state too large: this person's pages would hold %d bytes; at most %d are allowed per person"
                                % (total, self.max_person_bytes))

    def _room_for_page(self, s):
        """Refuses a new page past the connection's or the person's bound."""
        if self.max_pages_per_conn and len(s.pages) >= self.max_pages_per_conn:
            with self._mu:
                self._pages_refused += 1
            raise _Bad("opening a page: this connection has %d pages open, the most it may; close one first" % len(s.pages))
        if not self.max_pages_per_person:
            return
        with self._mu:
            n = sum(len(c.pages) for c in self._by_user.get(s.user_key(), ()) if c is not s) + len(s.pages)
            if n >= self.max_pages_per_person:
                self._pages_refused += 1
                full = True
            else:
                full = False
        if full:
            raise _Bad("opening a page: this person has %d pages open, the most they may; close one first" % n)

    def _new_page(self, s, id, kind):
        version, _, _ = self.hooks.schema(kind)
        return Page(s, id, kind, version, self._sched)

    def _open(self, s, o):
        if not o.page or len(o.page.encode()) > 128:
            raise _Bad("opening a page: page id must be 1-128 bytes")
        p = s.pages.get(o.page)
        st = pb.PageState(page=o.page)
        if p is None:
            self._room_for_page(s)
            p = self._new_page(s, o.page, o.kind)
            s.pages[o.page] = p
            self._ck.page_changed(p)  # a new page is checkpointed even if it wrote nothing
            with self._mu:
                self._count_pages_locked(s, 1)
            try:
                if self.hooks.open_page is not None:
                    self.hooks.open_page(p)
            except Exception as e:
                del s.pages[o.page]
                self._subs.remove(p, p._tables)
                with self._mu:
                    self._count_pages_locked(s, -1)
                if not isinstance(e, Refused):
                    self._log.error("open_page raised", page=o.page, traceback=traceback.format_exc())
                raise _Bad("opening page %r: %s" % (o.page, e))
            if o.after > 0:
                st.notice, st.resync, st.base = NOTICE_LOST, True, 0
        else:
            seq, floor, _ = p.coll.state()
            if o.after < floor or o.after > seq:
                st.resync, st.base = True, p.coll.resync()
            if p.ck.restored_at and o.after < p.ck.restored_at:
                # Restored from a checkpoint and not yet seen so: say so.
                st.notice = NOTICE_RESTORED
        st.kind, st.seq = p.kind, p.coll.last()
        r = pb.FrameReply(opened=st)
        r.identity.CopyFrom(self._identity(s))
        return r

    def _page(self, s, id):
        p = s.pages.get(id)
        if p is None:
            raise _Bad("page %r is not open here; open it again" % id)
        return p

    def _message(self, s, m):
        p = self._page(s, m.page)
        try:
            msg = json.loads(m.data) if m.data else None
        except ValueError as e:
            raise _Bad("page %r: the message is not JSON: %s" % (m.page, e))
        if m.msg_id and m.msg_id in p.answered:
            # Sent again (its answer was lost on the way): it ran once.
            r = pb.FrameReply(message=p.answered[m.msg_id])
            r.identity.CopyFrom(self._identity(s))
            return r
        res = pb.MessageResult()
        if self.hooks.message is None:
            res.error = "this application takes no page messages"
        else:
            # The message's deltas reach a waiting pull together, when it
            # ends (before its reply), not one at its first write.
            p.coll.hold()
            try:
                v = self.hooks.message(p, msg)
            except (Refused, StateTooLarge) as e:
                # A bound's refusal is the page's answer, as a refusal is
                # (the Go SDK answers its handler's error).
                res.error = str(e) or "refused"
                if isinstance(e, StateTooLarge):
                    res.code = "state_too_large"
                else:
                    res.code, res.retry = e.code or "", bool(e.retry)
            else:
                if v is not None:
                    res.data = json.dumps(v, separators=(",", ":")).encode("utf-8")
            finally:
                p.coll.release()
        if m.msg_id:
            p.answered[m.msg_id] = res
            while len(p.answered) > MAX_ANSWERED:
                p.answered.popitem(last=False)
            self._ck.page_changed(p)  # the memory is in the page's next checkpoint
        r = pb.FrameReply(message=res)
        r.identity.CopyFrom(self._identity(s))
        return r

    def _pull(self, s, pl, id):
        p = self._page(s, pl.page)
        wait = min(pl.wait_ms / 1000.0, MAX_PULL_WAIT)
        page = pl.page

        def answer(ds, last):
            r = pb.FrameReply(deltas=pb.Deltas(page=page, last=last))
            r.deltas.deltas.extend(ds)
            self._send_reply(id, r)

        p.coll.pull(pl.after, wait, answer)
        return None  # answered by the collector, now or later

    def _close(self, s, page):
        p = s.pages.pop(page, None)
        if p is not None:
            self._ck.page_gone(s, p)
            self._subs.remove(p, p._tables)
            with self._mu:
                self._count_pages_locked(s, -1)
            p.coll.cancel()
            if self.hooks.close_page is not None:
                self.hooks.close_page(p)
        return pb.FrameReply()

    # -- moves (docs/moves.md) ----------------------------------------------

    def _fence(self, f):
        with self._mu:
            known = self._epochs.get(f.user, 0)
            if f.user in self._frozen or f.epoch < known:
                raise _Moved(f.user, known)
            if f.epoch > known:
                self._epochs[f.user] = f.epoch

    def _freeze(self, fr):
        """Stops the person and returns their package; runs in their
        mailbox after every frame queued before it."""
        with self._mu:
            self._frozen.add(fr.user)
            if fr.epoch > self._epochs.get(fr.user, 0):
                self._epochs[fr.user] = fr.epoch
            sessions = list(self._by_user.get(fr.user, ()))
        # The freeze is here: the person's held requests went with it.
        self._maint.froze(fr.user)
        pkg = pb.UserPackage(format=PACKAGE_FORMAT, user=fr.user, epoch=fr.epoch, app=self.name, app_version=self.version)
        out = pb.Frozen(absent=not sessions)
        base = fr.base if fr.base_digest else 0
        for s in sessions:
            cp = pkg.conns.add(name=s.conn, user=s._user, values=s.values.encode())
            for p in s.pages.values():
                seq, floor, pending = p.coll.state()
                pp = cp.pages.add(id=p.id, kind=p.kind, schema=p.schema, seq=seq, floor=floor)
                if precopies.from_base(p, pp, base, pending):
                    # The destination holds the tree as the precopy saw it.
                    pkg.base_digest = fr.base_digest
                    out.from_base += 1
                else:
                    pp.tree = p.tree.encode()
                # Subscriptions and cache marks travel with the page.
                pp.tables.extend(p.tables())
                for path, tables in p._marks.items():
                    pp.marks[path].tables.extend(tables)
                for mid, res in p.answered.items():
                    pp.answered.add(msg_id=mid).result.CopyFrom(res)
                # A pull waiting here is answered now (with nothing): the
                # page pulls again and finds the person at their new home.
                p.coll.cancel()
                out.pages += 1
            out.conns += 1
        out.package = pkg.SerializeToString()
        return out

    def _thaw(self, t):
        with self._mu:
            self._frozen.discard(t.user)
            if t.epoch > self._epochs.get(t.user, 0):
                self._epochs[t.user] = t.epoch

    def _evict(self, user, forget=False):
        """Forgets a frozen person whose move committed. They stay fenced
        for TOMBSTONE_TTL (a frame still on its way is answered MOVED), unless
        forgotten: then their fence goes at once."""
        with self._mu:
            if user not in self._frozen:
                return
            for s in list(self._by_user.get(user, ())):
                self._drop_conn_locked(s)
                self._count_pages_locked(s, -len(s.pages))
            if forget:
                self._drop_marks_locked(user)
            else:
                self._evicted[user] = time.monotonic()
        self._sync_tables()
        self._released()

    def _drop_marks_locked(self, user):
        self._epochs.pop(user, None)
        self._frozen.discard(user)
        self._evicted.pop(user, None)

    def _tidy_locked(self, now):
        """Lets the fences past their time go; those of people who came
        back are theirs again. True when some went."""
        dropped = False
        for user, at in list(self._evicted.items()):
            if self._by_user.get(user) or user in self._users:
                del self._evicted[user]
            elif now - at >= TOMBSTONE_TTL:
                self._drop_marks_locked(user)
                dropped = True
        return dropped

    def _stage(self, env):
        """Stages a precopy for a wake to come (off the channel's reader)."""
        try:
            self._staged.stage(env.stage)
        except ValueError as e:
            self._reply_error(env.id, pb.Error.BAD_REQUEST, str(e))
            return
        self._reply(env.id, stage=pb.Stage())

    def _wake(self, w):
        pkg = pb.UserPackage()
        if w.package:
            pkg.ParseFromString(w.package)
            if pkg.format != PACKAGE_FORMAT:
                raise ValueError("package has format %d; this SDK reads %d" % (pkg.format, PACKAGE_FORMAT))
        base = None
        if pkg.base_digest:
            # Read before anything changes: a wake answered NOT_FOUND is
            # sent again with its base.
            base = self._staged.take(w, pkg.base_digest)
        with self._mu:
            known = self._epochs.get(w.user, 0)
            if known > w.epoch:
                raise _Moved(w.user, known)  # a late wake: the person moved on
            if known == w.epoch and w.user not in self._frozen and self._by_user.get(w.user):
                return pb.Woken()  # already awake here
            # Frozen at this very epoch, the person was parked where they
            # live (idle parking): let go already, or their next frame came
            # before the eviction. The package is what the freeze left.
            self._evicted.pop(w.user, None)
            for s in list(self._by_user.get(w.user, ())):
                # A stale copy from an earlier stay, or the frozen one the
                # eviction has not dropped yet: the package is the truth.
                self._drop_conn_locked(s)
                self._count_pages_locked(s, -len(s.pages))
            self._frozen.discard(w.user)
            self._epochs[w.user] = w.epoch
        out = pb.Woken()
        for cp in pkg.conns:
            s = Session(self, cp.name, cp.user)
            s.values.load(cp.values)
            for pp in cp.pages:
                p = self._new_page(s, pp.id, pp.kind)
                for a in pp.answered:
                    p.answered[a.msg_id] = a.result
                s.pages[p.id] = p
                out.pages += 1
                version, oldest, known_kind = self.hooks.schema(pp.kind)
                if known_kind and oldest <= pp.schema <= version:
                    precopies.load_page(p.tree, cp.name, pp, base)
                    p.coll.restore(pp.seq, pp.floor, pp.pending)
                    # Subscriptions and cache marks travel with the page.
                    p._marks = {path: list(tl.tables) for path, tl in pp.marks.items()}
                    try:
                        p.subscribe(*pp.tables)
                    except (TypeError, ValueError) as e:
                        self._log.warn("restoring a page's subscriptions", page=p.id, error=str(e))
                    if w.checkpoint:
                        restore_checkpoint(p, pp.seq, w.generation, NOTICE_RESTORED)
                    continue
                # Not guessed at: the page starts over, numbering on from
                # where it was, and its first delta says why.
                out.reset_pages += 1
                p.coll.restore(pp.seq, pp.seq, [])
                if self.hooks.open_page is not None:
                    try:
                        with _Serving(s):
                            self.hooks.open_page(p)
                    except Exception:
                        self._log.warn("reopening a page that restarted clean", page=p.id, traceback=traceback.format_exc())
                if w.checkpoint:
                    restore_checkpoint(p, pp.seq, w.generation, NOTICE_CHANGED)
                    continue
                p.coll.restart_clean(NOTICE_CHANGED)
            with self._mu:
                self._add_conn_locked(s)
                self._count_pages_locked(s, len(s.pages))
        self._signal_arrival(w.user)
        return out

    def _signal_arrival(self, user):
        """Tells a person's pages that arrived from a move, once per table
        they subscribe to, that the table may have changed while they
        travelled (a change published then went to the worker they left):
        their cached values marked with it are invalidated and the app hears
        of it with no data and no origin. Queued in the person's mailbox,
        after the wake that runs there now."""
        with self._mu:
            sessions = list(self._by_user.get(user, ()))
        tables = sorted({t for s in sessions for p in s.pages.values() for t in p._tables})
        for t in tables:
            self._enqueue(user, pb.Envelope(table_change=pb.TableChange(table=t)))

    # -- tables (tables.py) -------------------------------------------------

    def publish(self, table, data):
        """stickyd.publish: this worker's subscribed pages first, then the
        host, which carries the change to the other workers that watch the
        table."""
        check_tables([table])
        raw = encode_data(table, data)
        self._deliver_table(pb.TableChange(table=table, data=raw, origin=self.worker_id))
        self._send(pb.Envelope(publish=pb.Publish(table=table, data=raw, store_index=self.store_index)))

    def saw_store_index(self, i):
        """Raises the store index this worker's reads wait for."""
        with self._mu:
            if i > self.store_index:
                self.store_index = i

    def _deliver_table(self, c):
        """Queues a change in the mailbox of every person with a page
        subscribed to its table."""
        # What the publisher committed before publishing is read after this.
        self.saw_store_index(c.store_index)
        for user in self._subs.users(c.table):
            self._enqueue(user, pb.Envelope(table_change=c))

    def _apply_table(self, user, c):
        """Runs in a person's mailbox: each of their pages subscribed to the
        table drops its cached values marked with it, then the app hears of
        it (its writes reach a waiting pull together, as a message's do). A
        failure of the app is logged: the change is not the app's to
        refuse."""
        hook = self.hooks.on_table_change
        for p in self._subs.pages_of(c.table, user):
            for path, tables in list(p._marks.items()):
                if c.table in tables:
                    p.tree.delete(path)
                    del p._marks[path]
            if hook is None:
                continue
            try:
                data = decode_data(c.data)  # each page its own copy
            except ValueError as e:
                self._log.warn("a table change whose data is not JSON", table=c.table, origin=c.origin, error=str(e))
                data = None
            p.coll.hold()
            try:
                with _Serving(p.session):
                    hook(p, TableChange(c.table, data, c.origin))
            except Exception:
                self._log.warn("the app failed on a table change", table=c.table, page=p.id,
                               traceback=traceback.format_exc())
            finally:
                p.coll.release()

    def _sync_tables(self):
        """Tells the host the worker's set of subscribed tables when it
        changed since the last time."""
        self._subs.sync(lambda tables: self._send(pb.Envelope(tables=pb.Tables(tables=tables))))

    # -- probes -------------------------------------------------------------

    def _probe(self):
        """The worker's numbers, as the Go SDK's probe says them: CPU
        seconds (user + system) since it began, its resident memory, its
        live heap (usage.py: what Python objects and the C allocations hold,
        not RSS, which keeps what was freed), its threads (the goroutines
        field), and per person what they consumed here."""
        with self._mu:
            release = self._tidy_locked(time.monotonic())
            depth = sum(len(u.queue) for u in self._users.values())
            r = pb.ProbeReply(users=len(self._by_user), conns=len(self._conns), pages=self._pages,
                              frames=self._frames, mailbox_depth=depth, state_refused=self._state_refused,
                              pages_refused=self._pages_refused)
            for k in self._dirty:
                a = self._accounts[k]
                u = self._users.get(k)
                r.per_user.add(user=k, busy_seconds=round(a.busy, 6), frames=a.frames, state_bytes=a.state_bytes,
                               queued=len(u.queue) if u is not None else 0,
                               pages=sum(len(s.pages) for s in self._by_user.get(k, ())))
            r.left.extend(self._left)
            self._dirty.clear()
            self._left = []
        if release:
            self._released()
        r.cpu_seconds = usage.cpu_seconds()
        r.rss_bytes = usage.rss_bytes()
        r.heap_bytes = usage.heap_bytes()
        r.goroutines = usage.threads()
        self._maint.report(r)
        return r

    def _released(self):
        """People left this worker: the memory they held is collected and
        given back to the system soon (within a second, at most once per
        RELEASE_EVERY; usage.release), rather than when it happens to be,
        so that the probes show the heap and RSS of who is left."""
        with self._mu:
            if self._release_due or self._closed:
                return
            self._release_due = True
            wait = max(RELEASE_MIN, RELEASE_EVERY - (time.monotonic() - self._last_release))
        self._sched.after(wait, lambda: self._submit(self._give_back))

    def _give_back(self):
        with self._mu:
            self._release_due = False
            self._last_release = time.monotonic()
        usage.release()
