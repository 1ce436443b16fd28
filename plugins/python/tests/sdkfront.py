"""A front and its maps in a few lines, over real runtimes (stickyd.runtime
on an in-memory channel), for the adapters' tests: it binds new
connections, applies a login as internal/front's afterIdentity does (the
connection joins its person's worker; the worker that served the frame lets
it go), moves people and restarts workers with the packages they freeze,
and acts on the workers' Forget notices as the agent does, and reads
streamed responses as the front does (HTTPRead frames to the worker that
answered). Browsers keep their cookies as a browser would."""

import os
import queue
import sys
import threading
from http.cookies import SimpleCookie

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from stickyd import stickyd_pb2 as pb  # noqa: E402
from stickyd.runtime import Hooks, Runtime  # noqa: E402


class NullLog:
    def __getattr__(self, name):
        return lambda *a, **kv: None


class Worker:
    """One runtime; calls wait for their answer, notices are collected."""

    def __init__(self, app, worker_id, notices, log=None, max_streams=None):
        self.id = worker_id
        self._mu = threading.Lock()
        self._waiting = {}
        self._next = 0
        self._notices = notices
        self.rt = Runtime(app, Hooks(), self._send, log or NullLog(), name="t", threads=4, max_streams=max_streams)
        self.rt.worker_id = worker_id

    def _send(self, env):
        if env.reply:
            with self._mu:
                q = self._waiting.pop(env.id, None)
            if q is not None:
                q.put(env)
        else:
            self._notices.put((self.id, env))

    def call(self, **body):
        q = queue.Queue()
        with self._mu:
            self._next += 1
            id = self._next
            self._waiting[id] = q
        self.rt.handle(pb.Envelope(id=id, **body))
        return q.get(timeout=10)

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
    def __init__(self, app, workers=2, log=None, max_streams=None):
        self.app = app
        self.notices = queue.Queue()
        self.workers = {}
        self._runtime = {"log": log, "max_streams": max_streams}
        for i in range(workers):
            w = Worker(app, "py-%d" % i, self.notices, **self._runtime)
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
        self.workers = {wid: Worker(self.app, wid, self.notices, **self._runtime) for wid in self.workers}
        for user, (wid, e, pkg) in parked.items():
            woken = self.workers[wid].call(wake=pb.Wake(user=user, epoch=e, package=pkg))
            assert not woken.HasField("error"), woken
            self.epochs[user] = e
