"""A front and its maps in a few lines, over real runtimes (stickyd.runtime
on an in-memory channel), for the adapters' tests: it binds new
connections, applies a login as internal/front's afterIdentity does (the
connection joins its person's worker; the worker that served the frame lets
it go), moves people and restarts workers with the packages they freeze,
and acts on the workers' Forget notices as the agent does, and reads
streamed responses as the front does (HTTPRead frames to the worker that
answered). Browsers keep their cookies as a browser would. Its Host answers
what workers send their host unasked as the agent does: their subscribed
tables, their publishes (carried to the other workers that watch the
table), the global store's reads and grants, and AI gateway calls (a fake
gateway: internal/gateway/cluster's FromWorker, in a few lines)."""

import json
import os
import queue
import sys
import threading
import time
from http.cookies import SimpleCookie

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from stickyd import stickyd_pb2 as pb  # noqa: E402
from stickyd.runtime import Hooks, Runtime  # noqa: E402


class NullLog:
    def __getattr__(self, name):
        return lambda *a, **kv: None


class Worker:
    """One runtime; calls wait for their answer, what the worker sends
    unasked goes to the host, and its notices are collected."""

    def __init__(self, app, worker_id, notices, host, log=None, max_streams=None, hooks=None):
        self.id = worker_id
        self._mu = threading.Lock()
        self._waiting = {}
        self._next = 0
        self._notices = notices
        self._host = host
        self.rt = Runtime(app, hooks or Hooks(), self._send, log or NullLog(), name="t", threads=4,
                          max_streams=max_streams)
        self.rt.worker_id = worker_id

    def _send(self, env):
        if env.reply:
            with self._mu:
                q = self._waiting.pop(env.id, None)
            if q is not None:
                q.put(env)
            return
        if self._host.from_worker(self, env):
            return
        self._notices.put((self.id, env))

    def start(self, **body):
        """Sends a request; the queue its answer will be put in."""
        q = queue.Queue()
        with self._mu:
            self._next += 1
            id = self._next
            self._waiting[id] = q
        self.rt.handle(pb.Envelope(id=id, **body))
        return q

    def call(self, **body):
        return self.start(**body).get(timeout=10)

    def frame(self, user, conn, epoch=0, **kind):
        return self.call(frame=pb.Frame(user=user, conn=conn, epoch=epoch, **kind))

    def read(self, stream, wait_ms=2000, cancel=False):
        """One HTTPRead: the envelope answering it (frame_reply.body, or an
        error)."""
        return self.call(frame=pb.Frame(read=pb.HTTPRead(stream=stream, wait_ms=wait_ms, cancel=cancel)))


class Response:
    def __init__(self, status, headers, body, worker, identity, stream=0):
        self.status = status
        self.headers = headers  # name -> [values]
        self.body = body  # all of it, or a stream's head
        self.worker = worker
        self.identity = identity
        self.stream = stream  # not 0: the rest is read with Front.read

    def json(self):
        import json
        return json.loads(self.body)


class Browser:
    """A cookie jar and, once the front has bound one, a connection."""

    def __init__(self):
        self.conn = None
        self.cookies = {}

    def take(self, set_cookies):
        for line in set_cookies:
            c = SimpleCookie()
            c.load(line)
            for name, m in c.items():
                if m["max-age"] in ("0", 0) or "1970" in m["expires"]:
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = m.value

    def cookie_header(self):
        return "; ".join("%s=%s" % kv for kv in self.cookies.items())


class Front:
    def __init__(self, app, workers=2, log=None, max_streams=None, hooks=None):
        self.app = app
        self.notices = queue.Queue()
        self.host = Host(self)
        self.workers = {}
        self._runtime = {"log": log, "max_streams": max_streams, "hooks": hooks}
        for i in range(workers):
            w = Worker(app, "py-%d" % i, self.notices, self.host, **self._runtime)
            self.workers[w.id] = w
        self.conns = {}  # connection -> user key
        self.home = {}  # user key -> worker id
        self.epochs = {}  # user key -> epoch
        self.forgotten = []  # the people the workers asked to forget
        self.logins = []  # (user, attributes) of each login the front recorded

    def close(self):
        for w in self.workers.values():
            w.rt.close()

    def _least_loaded(self):
        load = {wid: 0 for wid in self.workers}
        for wid in self.home.values():
            load[wid] += 1
        return min(sorted(load), key=lambda wid: load[wid])

    def _notices(self):
        """Acts on the Forget notices received so far: the person leaves
        the maps and their worker, as the agent's forgetFromWorker does."""
        while True:
            try:
                wid, env = self.notices.get_nowait()
            except queue.Empty:
                return
            if env.WhichOneof("body") != "forget":
                continue
            user = env.forget.user
            self.forgotten.append(user)
            home = self.home.pop(user, None)
            for c in [c for c, u in self.conns.items() if u == user]:
                del self.conns[c]
            if home is not None:
                e = self.epochs.get(user, 0) + 1
                self.workers[home].call(freeze=pb.Freeze(user=user, epoch=e))
                self.workers[home].call(evict=pb.Evict(user=user, forget=True))

    def request(self, b, method, path, body=b"", headers=(), place=None):
        """One request of browser b; place picks a newcomer's worker."""
        self._notices()
        req = pb.HTTPRequest(method=method, url=path, body=body, host="site.test", remote_addr="127.0.0.1:5000")
        hs = list(headers)
        if b.cookies:
            hs.append(("Cookie", b.cookie_header()))
        for name, value in hs:
            req.headers.add(name=name, values=[value])
        known = b.conn is not None and b.conn in self.conns
        if known:
            user = self.conns[b.conn]
            wid = self.home[user]
            env = self.workers[wid].frame(user, b.conn, self.epochs.get(user, 0), http=req)
        else:
            wid = place or self._least_loaded()
            env = self.workers[wid].frame("", "", http=req)
        if env.HasField("error"):
            raise AssertionError("%s %s: %s" % (method, path, env.error))
        r = env.frame_reply
        self._identity(b, known, wid, r.identity)
        headers = {h.name: list(h.values) for h in r.http.headers}
        b.take(headers.get("Set-Cookie", []))
        return Response(r.http.status, headers, r.http.body, wid, r.identity, r.http.stream)

    def frame(self, b, **kind):
        """One frame of browser b's connection, on its person's worker: the
        FrameReply (a frame refused fails the test)."""
        user = self.conns[b.conn]
        env = self.workers[self.home[user]].frame(user, b.conn, self.epochs.get(user, 0), **kind)
        if env.HasField("error"):
            raise AssertionError("%s: %s" % (kind, env.error))
        return env.frame_reply

    def open(self, b, page, kind="k"):
        """Opens page on b's connection: its PageState."""
        return self.frame(b, open=pb.PageOpen(page=page, kind=kind)).opened

    def message(self, b, page, msg):
        """Sends the page the JSON msg: its answer, decoded; a refusal raises
        stickyd.Refused's text as an AssertionError."""
        res = self.frame(b, message=pb.PageMessage(page=page, data=json.dumps(msg).encode())).message
        if res.error:
            raise AssertionError("message %s: %s" % (msg, res.error))
        return json.loads(res.data) if res.data else None

    def pull(self, b, page, after, wait_ms=0):
        """The page's deltas after after (Deltas)."""
        return self.frame(b, pull=pb.PagePull(page=page, after=after, wait_ms=wait_ms)).deltas

    def read(self, r, wait_ms=2000, cancel=False):
        """One read of the streamed response r, on the worker that answered
        it: the envelope (frame_reply.body, or an error)."""
        return self.workers[r.worker].read(r.stream, wait_ms, cancel)

    def read_all(self, r):
        """The rest of the streamed response r: (body, error)."""
        data = b""
        while True:
            env = self.read(r)
            if env.HasField("error"):
                raise AssertionError("reading stream %d: %s" % (r.stream, env.error))
            body = env.frame_reply.body
            data += body.data
            if body.end:
                return data, body.error

    def _identity(self, b, known, served, id):
        if not id.conn:
            return
        if not known:
            b.conn = id.conn
            old = "~" + id.conn
            self.conns[id.conn] = old
            self.home.setdefault(old, served)
            if not id.user:
                return
        else:
            old = self.conns[id.conn]
            if not id.user or id.user == old:
                if id.attributes:
                    self.logins.append((id.user, dict(id.attributes)))
                return
        user = id.user
        self.logins.append((user, dict(id.attributes)))
        self.conns[id.conn] = user
        if old.startswith("~") and old not in self.conns.values():
            self.home.pop(old, None)
        home = self.home.setdefault(user, served)
        if home != served:
            # The person lives elsewhere: the connection joins them there
            # and the worker that served this frame lets it go.
            self.workers[served].frame(old, id.conn, self.epochs.get(old, 0), release=pb.Release())

    def move(self, user, to=None):
        """Moves user to another worker with their package."""
        frm = self.home[user]
        to = to or next(w for w in sorted(self.workers) if w != frm)
        e = self.epochs.get(user, 0) + 1
        fz = self.workers[frm].call(freeze=pb.Freeze(user=user, epoch=e)).frozen
        woken = self.workers[to].call(wake=pb.Wake(user=user, epoch=e, package=fz.package))
        assert not woken.HasField("error"), woken
        self.workers[frm].call(evict=pb.Evict(user=user))
        self.home[user], self.epochs[user] = to, e
        return fz

    def restart(self):
        """Stops every worker with its people parked, starts new ones (new
        processes: nothing in memory) and wakes each person where they were."""
        self._notices()
        parked = {}
        for user, wid in self.home.items():
            e = self.epochs.get(user, 0) + 1
            parked[user] = (wid, e, self.workers[wid].call(freeze=pb.Freeze(user=user, epoch=e)).frozen.package)
        self.close()
        self.workers = {wid: Worker(self.app, wid, self.notices, self.host, **self._runtime) for wid in self.workers}
        for user, (wid, e, pkg) in parked.items():
            woken = self.workers[wid].call(wake=pb.Wake(user=user, epoch=e, package=pkg))
            assert not woken.HasField("error"), woken
            self.epochs[user] = e


def _overlaps(p, q):
    """Two store paths conflict when one is equal to, or under, the other."""
    return p == q or p.startswith(q + "/") or q.startswith(p + "/")


class Host:
    """What the agent does for what its workers send unasked, in a few
    lines. Tables: each worker's set of subscribed tables, and a change one
    publishes carried to the other workers whose set holds the table (a
    TableChange request, as internal/host/tables.go sends it), counted in
    published, unwatched and sends[worker] like the agent's metrics. The
    global store (internal/store's rules): values by path; a grant is held
    when it conflicts with no held grant and no earlier waiting request,
    carries the content of its paths, ends at its lease, and a commit or
    release under a grant that ended is refused STALE_GRANT. Each store
    call is answered on a thread of its own (an acquire waits its turn)."""

    def __init__(self, front):
        self._front = front
        self._mu = threading.Condition()  # guards everything below
        self.tables = {}  # worker id -> the set it last told
        self.published = 0
        self.unwatched = 0
        self.sends = {}  # worker id -> table changes sent to it
        self.values = {}  # store path -> JSON bytes
        self.grants = {}  # grant id -> _Grant, held or waiting, in request order
        self._next_grant = 0
        self._next_token = 0
        # The gateway: False refuses every call as an agent without a
        # gateway block does. calls are (worker id, session, call JSON,
        # stream) as they came; release lets the "wait" model answer.
        self.gateway = True
        self.gateway_calls = []
        self.release = threading.Event()

    def from_worker(self, w, env):
        """Handles what worker w sent unasked; False for what the front
        handles itself (its notices)."""
        body = env.WhichOneof("body")
        if body == "tables":
            with self._mu:
                self.tables[w.id] = set(env.tables.tables)
            return True
        if body == "publish":
            self._fan_out(w.id, env.publish)
            return True
        if body in ("store_get", "grant_acquire", "grant_commit", "grant_release"):
            threading.Thread(target=self._store_call, args=(w, env), daemon=True).start()
            return True
        if body == "gateway_call":
            threading.Thread(target=self._gateway_call, args=(w, env), daemon=True).start()
            return True
        return False

    def _gateway_call(self, w, env):
        """Answers a GatewayCall as the agent does, for the models: "small"
        answers "hello world" (streamed in two pieces, then the last with
        its usage), "midway" fails after one piece, "cut" ends without its
        last piece, "wait" answers "waited" once release is set, "never"
        never answers, "budget" is refused as a spent budget; anything else
        is an unknown model."""
        gc = env.gateway_call
        call = json.loads(gc.call)
        with self._mu:
            self.gateway_calls.append((w.id, gc.session, call, gc.stream))

        def reply(**body):
            w.rt.handle(pb.Envelope(id=env.id, reply=True, **body))

        def refuse(code, kind, message):
            reply(error=pb.Error(code=code, kind=kind, message=message))

        def chunk(c, error="", kind=""):
            w.rt.handle(pb.Envelope(gateway_chunk=pb.GatewayChunk(
                call_id=env.id, chunk=json.dumps(c).encode(), last=bool(c.get("done")) or bool(error),
                error=error, error_kind=kind)))

        model = call["request"]["model"]
        if not self.gateway:
            return refuse(pb.Error.UNAVAILABLE, "", "this agent has no gateway block")
        if model == "budget":
            return refuse(pb.Error.EXHAUSTED, "budget_exceeded", "the session's budget is spent")
        if model == "never":
            return
        if model == "wait":
            self.release.wait(10)
            if not gc.stream:
                return reply(gateway_reply=pb.GatewayReply(response=json.dumps({"content": "waited"}).encode()))
        elif model not in ("small", "midway", "cut"):
            return refuse(pb.Error.BAD_REQUEST, "unknown_model", 'unknown model "%s"' % model)
        if not gc.stream:
            resp = {"id": "r1", "model": "small-v1", "content": "hello world", "finish_reason": "stop",
                    "usage": {"input_tokens": 12, "cached_input_tokens": 30, "output_tokens": 7},
                    "provider": "openai", "deployment": "local", "cost_micros": 55}
            return reply(gateway_reply=pb.GatewayReply(response=json.dumps(resp).encode()))
        if model == "midway":
            chunk({"delta": "hel"})
            chunk({}, "the provider did not answer: server", "server")
            return refuse(pb.Error.UNAVAILABLE, "server", "the provider did not answer: server")
        chunk({"delta": "hello", "provider": "openai", "deployment": "local"})
        chunk({"delta": " world"})
        if model != "cut":
            chunk({"done": True, "finish_reason": "stop", "usage": {"input_tokens": 12, "output_tokens": 7},
                   "provider": "openai", "deployment": "local", "cost_micros": 40})
        reply(gateway_reply=pb.GatewayReply())

    def _fan_out(self, origin, p):
        with self._mu:
            self.published += 1
            to = sorted(wid for wid, ts in self.tables.items() if wid != origin and p.table in ts)
            if not to:
                self.unwatched += 1
            for wid in to:
                self.sends[wid] = self.sends.get(wid, 0) + 1
        for wid in to:
            self._front.workers[wid].start(table_change=pb.TableChange(table=p.table, data=p.data, origin=origin))

    def _store_call(self, w, env):
        body = env.WhichOneof("body")
        try:
            if body == "store_get":
                reply = {"store_values": pb.StoreValues(values=self.get(env.store_get.paths))}
            elif body == "grant_acquire":
                reply = {"grant_reply": self._acquire(w.id, env.grant_acquire)}
            elif body == "grant_commit":
                c = env.grant_commit
                self._commit(w.id, c.id, c.token, dict(c.set), list(c.delete))
                reply = {"grant_commit": pb.GrantCommit()}
            else:
                self._release(w.id, env.grant_release.id)
                reply = {"grant_release": pb.GrantRelease()}
        except _StoreRefused as e:
            reply = {"error": pb.Error(code=e.code, message=str(e))}
        w.rt.handle(pb.Envelope(id=env.id, reply=True, **reply))

    def get(self, paths):
        """Every value at or under each path."""
        with self._mu:
            return {k: v for k, v in self.values.items() if any(k == p or k.startswith(p + "/") for p in paths)}

    def _expire_locked(self):
        now = time.monotonic()
        for g in list(self.grants.values()):
            if g.token and now >= g.expires:
                del self.grants[g.id]
                self._mu.notify_all()

    def _grantable_locked(self, g):
        for other in self.grants.values():
            if other is g:
                return True  # every earlier request was looked at
            if any(_overlaps(p, q) for p in g.paths for q in other.paths):
                return False
        return True

    def _acquire(self, worker, req):
        with self._mu:
            self._next_grant += 1
            g = _Grant(self._next_grant, worker, list(req.paths), req.lease_ms / 1000.0)
            self.grants[g.id] = g
            deadline = time.monotonic() + req.wait_ms / 1000.0
            while True:
                self._expire_locked()
                if self._grantable_locked(g):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    del self.grants[g.id]
                    self._mu.notify_all()
                    raise _StoreRefused(pb.Error.UNAVAILABLE, "no grant on %s within %gs" % (g.paths, req.wait_ms / 1000.0))
                self._mu.wait(min(left, 0.02))
            self._next_token += 1
            g.token, g.expires = self._next_token, time.monotonic() + g.lease
            content = {k: v for k, v in self.values.items() if any(k == p or k.startswith(p + "/") for p in g.paths)}
            return pb.GrantReply(id=g.id, token=g.token, values=content, lease_ms=int(g.lease * 1000))

    def _held_locked(self, worker, id, token=None):
        self._expire_locked()
        g = self.grants.get(id)
        if g is None or not g.token or g.worker != worker or (token is not None and token != g.token):
            raise _StoreRefused(pb.Error.STALE_GRANT, "grant %d: grant not held" % id)
        return g

    def _commit(self, worker, id, token, set, delete):
        with self._mu:
            g = self._held_locked(worker, id, token)
            for p in list(set) + delete:
                if not any(p == q or p.startswith(q + "/") for q in g.paths):
                    raise _StoreRefused(pb.Error.BAD_REQUEST, "%r: write outside the grant's paths" % p)
            for p, v in set.items():
                try:
                    json.loads(v)
                except ValueError as e:
                    raise _StoreRefused(pb.Error.BAD_REQUEST, "%r: invalid value: %s" % (p, e)) from None
            for p in delete:
                for k in [k for k in self.values if k == p or k.startswith(p + "/")]:
                    del self.values[k]
            self.values.update(set)
            del self.grants[id]
            self._mu.notify_all()

    def _release(self, worker, id):
        with self._mu:
            g = self.grants.get(id)
            if g is not None and g.worker == worker:
                del self.grants[id]
                self._mu.notify_all()


class _Grant:
    __slots__ = ("id", "worker", "paths", "lease", "token", "expires")

    def __init__(self, id, worker, paths, lease):
        self.id, self.worker, self.paths, self.lease = id, worker, paths, lease
        self.token, self.expires = 0, 0.0


class _StoreRefused(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
