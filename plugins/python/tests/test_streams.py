"""Streamed site responses (wsgi.py, streams.py) through the runtime, behind
sdkfront: a body still running STREAM_AFTER after the response began is
answered early and read with HTTPRead frames; the person's mailbox is not
held by it; cancel, errors, backpressure, the bound and idle streams."""

import itertools
import os
import queue
import sys
import threading
import time
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import sdkfront  # noqa: E402

from stickyd import streams, wsgi  # noqa: E402
from stickyd import stickyd_pb2 as pb  # noqa: E402

try:
    import flask
except ImportError:  # make deps installs python3-flask
    flask = None

CHUNK = 64 << 10


class Body:
    """A WSGI iterable playing its steps: bytes are yielded, a number is
    slept, an Event is waited for, an exception is raised, a callable is
    called. It counts the blocks taken and its close() calls."""

    def __init__(self, steps):
        self._steps = iter(steps)
        self.taken = 0
        self.closes = 0
        self.closed = threading.Event()

    def __iter__(self):
        return self

    def __next__(self):
        for step in self._steps:
            if isinstance(step, bytes):
                self.taken += 1
                return step
            if isinstance(step, (int, float)):
                time.sleep(step)
            elif isinstance(step, threading.Event):
                if not step.wait(10):
                    raise AssertionError("the test never opened the gate")
            elif isinstance(step, BaseException):
                raise step
            else:
                step()
        raise StopIteration

    def close(self):
        self.closes += 1
        self.closed.set()


class Unstreamed(Body):
    """Django's HttpResponse: it says streaming is False."""

    streaming = False


BODIES = {}  # path -> a function making the body


def app(environ, start_response):
    write = start_response("200 OK", [("Content-Type", "text/plain")])
    return BODIES[environ["PATH_INFO"]](write)


class Log:
    """Records the worker's log lines as (level, message, fields)."""

    def __init__(self):
        self.lines = []

    def __getattr__(self, level):
        return lambda msg, **kv: self.lines.append((level, msg, kv))

    def find(self, level, text):
        return [kv for lv, msg, kv in self.lines if lv == level and text in msg]


class StreamTest(unittest.TestCase):
    def setUp(self):
        BODIES.clear()
        BODIES["/list"] = lambda write: [b"whole"]
        self.log = Log()
        self.front = sdkfront.Front(app, workers=1, log=self.log)
        self.rt = self.front.workers["py-0"].rt

    def tearDown(self):
        self.front.close()

    def body(self, path, steps, kind=Body):
        b = kind(steps)
        BODIES[path] = lambda write: b
        return b

    def test_prompt_bodies_stay_whole(self):
        f = self.front
        quick = self.body("/quick", [b"q1", b"q2"])
        # Django's HttpResponse is sent whole however long it iterates.
        slow = self.body("/unstreamed", [b"u1", 0.1, b"u2"], Unstreamed)
        for path, want in (("/list", b"whole"), ("/quick", b"q1q2"), ("/unstreamed", b"u1u2")):
            r = f.request(sdkfront.Browser(), "GET", path)
            self.assertEqual((r.status, r.body, r.stream), (200, want, 0), path)
        self.assertEqual((quick.closes, slow.closes), (1, 1))
        # A list or an unstreamed response arms no timer; another iterable
        # does (its cancelled timer stays in the heap until its deadline).
        with mock.patch.object(wsgi, "STREAM_AFTER", 30):
            for path in ("/list", "/unstreamed"):
                f.request(sdkfront.Browser(), "GET", path)
            self.assertEqual(len(self.rt._sched._heap), 0)
            self.body("/quick", [b"q"])
            f.request(sdkfront.Browser(), "GET", "/quick")
            self.assertEqual(len(self.rt._sched._heap), 1)

    def test_slow_body_streams(self):
        f = self.front
        b = self.body("/slow", [b"a", 0.3, b"b"])
        began = time.monotonic()
        r = f.request(sdkfront.Browser(), "GET", "/slow")
        self.assertLess(time.monotonic() - began, 0.2)
        self.assertEqual((r.status, r.body, r.headers["Content-Type"]), (200, b"a", ["text/plain"]))
        self.assertNotEqual(r.stream, 0)
        self.assertTrue(r.identity.conn)  # a newcomer's answer names its connection
        self.assertEqual(f.read_all(r), (b"b", ""))
        self.assertEqual(b.closes, 1)
        self.assertEqual(f.read(r).error.code, pb.Error.NOT_FOUND)  # ended and read: forgotten
        # The next stream has the next id.
        self.body("/slow", [b"a", 0.1, b"b"])
        r2 = f.request(sdkfront.Browser(), "GET", "/slow")
        self.assertEqual(r2.stream, r.stream + 1)
        self.assertEqual(f.read_all(r2), (b"b", ""))

    def test_write_counts_as_body(self):
        f = self.front
        gate = threading.Event()
        writes = {}

        def make(write):
            writes["w"] = write
            write(b"w")
            return Body([b"a", gate, lambda: writes["w"](b"c"), b"d"])

        BODIES["/w"] = make
        r = f.request(sdkfront.Browser(), "GET", "/w")
        self.assertEqual(r.body, b"wa")
        self.assertNotEqual(r.stream, 0)
        gate.set()
        self.assertEqual(f.read_all(r), (b"cd", ""))

    def test_mailbox_goes_on(self):
        """The person's next frames run while their streamed body is still
        being produced; the mailbox ends idle and unowned."""
        f = self.front
        br = sdkfront.Browser()
        f.request(br, "GET", "/list")  # the connection is bound: its frames go to its mailbox
        gate = threading.Event()
        b = self.body("/gated", [b"a", gate, b"b"])
        r = f.request(br, "GET", "/gated")
        self.assertEqual((r.body, r.stream != 0), (b"a", True))
        for _ in range(3):
            began = time.monotonic()
            self.assertEqual(f.request(br, "GET", "/list").body, b"whole")
            self.assertLess(time.monotonic() - began, 1)
        self.assertEqual(b.closes, 0)  # still producing
        gate.set()
        self.assertEqual(f.read_all(r), (b"b", ""))
        self.assertTrue(b.closed.wait(2))
        self.assertEqual(f.request(br, "GET", "/list").body, b"whole")
        deadline = time.monotonic() + 2
        while self.rt._users and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(self.rt._users, {})  # the mailbox was let go: nothing runs it

    def test_one_thread_per_mailbox(self):
        """When a streamed body ends, its thread leaves the mailbox to the
        turn that runs it now: the person's frames still run one at a time."""
        f = self.front
        br = sdkfront.Browser()
        f.request(br, "GET", "/list")
        w, user = f.workers[f.home[f.conns[br.conn]]], f.conns[br.conn]
        gate = threading.Event()
        self.body("/gated", [b"a", gate, b"b"])
        r = f.request(br, "GET", "/gated")
        self.assertNotEqual(r.stream, 0)
        mu, running = threading.Lock(), [0, 0]  # now, most at once

        def busy(write):
            with mu:
                running[0] += 1
                running[1] = max(running)
            time.sleep(0.2)
            with mu:
                running[0] -= 1
            return [b"ok"]

        BODIES["/busy"] = busy
        answers = queue.Queue()
        for _ in range(3):
            req = pb.HTTPRequest(method="GET", url="/busy", host="site.test")
            threading.Thread(target=lambda: answers.put(w.frame(user, br.conn, 0, http=req)), daemon=True).start()
        time.sleep(0.05)  # one runs, two wait in the mailbox
        gate.set()  # the body ends: its thread goes back to _drain
        for _ in range(3):
            self.assertEqual(answers.get(timeout=5).frame_reply.http.body, b"ok")
        self.assertEqual(running[1], 1)
        self.assertEqual(f.read_all(r), (b"b", ""))

    def test_cancel_closes(self):
        f = self.front
        gate = threading.Event()
        b = self.body("/c", [b"a", gate, b"b", b"c"])
        r = f.request(sdkfront.Browser(), "GET", "/c")
        self.assertNotEqual(r.stream, 0)
        body = f.read(r, cancel=True).frame_reply.body
        self.assertEqual((body.data, body.end, body.error), (b"", True, ""))
        gate.set()
        self.assertTrue(b.closed.wait(2))
        self.assertEqual((b.closes, b.taken), (1, 2))  # stopped at its next block
        self.assertEqual(f.read(r).error.code, pb.Error.NOT_FOUND)
        self.assertEqual(self.log.find("error", ""), [])

    def test_error_after_first_block(self):
        f = self.front
        gate = threading.Event()
        b = self.body("/e", [b"a", gate, b"b", ValueError("boom")])
        r = f.request(sdkfront.Browser(), "GET", "/e")
        self.assertEqual((r.body, r.stream != 0), (b"a", True))
        gate.set()
        data, error = f.read_all(r)
        self.assertEqual(data, b"b")
        self.assertIn("boom", error)
        self.assertEqual(b.closes, 1)
        logged = self.log.find("error", "app raised")
        self.assertEqual(len(logged), 1)
        self.assertIn("ValueError", logged[0]["traceback"])

    def test_backpressure(self):
        f = self.front
        gate = threading.Event()
        blocks = 128  # 8 MiB
        b = self.body("/big", [b"a", gate] + [b"x" * CHUNK] * blocks)
        r = f.request(sdkfront.Browser(), "GET", "/big")
        self.assertNotEqual(r.stream, 0)
        gate.set()
        time.sleep(0.3)
        # The buffer is full: the producer waits with at most one block in hand.
        held = streams.MAX_BUFFERED // CHUNK
        self.assertGreaterEqual(b.taken, 1 + held)
        self.assertLessEqual(b.taken, 1 + held + 1)
        self.assertEqual(b.closes, 0)
        # A read answers at most MAX_READ; the rest stays for the next.
        sizes = []
        with mock.patch.object(streams, "MAX_READ", 3 * CHUNK):
            while True:
                body = f.read(r).frame_reply.body
                sizes.append(len(body.data))
                if body.end:
                    break
        self.assertLessEqual(max(sizes), 3 * CHUNK)
        self.assertEqual((sum(sizes), body.error), (blocks * CHUNK, ""))
        self.assertTrue(b.closed.wait(2))
        self.assertEqual(b.taken, 1 + blocks)

    def test_read_waits(self):
        """A read with nothing buffered waits for the next block (answered
        by the producer), or answers nothing after wait_ms; a second read
        answers the first."""
        f = self.front
        gates = [threading.Event(), threading.Event()]
        self.body("/r", [b"a", gates[0], b"b", gates[1], b"c"])
        r = f.request(sdkfront.Browser(), "GET", "/r")
        began = time.monotonic()
        body = f.read(r, wait_ms=100).frame_reply.body
        self.assertEqual((body.data, body.end), (b"", False))
        self.assertGreaterEqual(time.monotonic() - began, 0.09)
        threading.Timer(0.1, gates[0].set).start()
        body = f.read(r, wait_ms=5000).frame_reply.body
        self.assertEqual((body.data, body.end), (b"b", False))
        w = f.workers[r.worker]
        first = self._read_async(w, r.stream)
        time.sleep(0.05)
        second = self._read_async(w, r.stream)
        env = first.get(timeout=2)
        self.assertEqual((env.frame_reply.body.data, env.frame_reply.body.end), (b"", False))
        gates[1].set()
        self.assertEqual(second.get(timeout=2).frame_reply.body.data, b"c")
        self.assertEqual(f.read_all(r), (b"", ""))

    @staticmethod
    def _read_async(w, stream):
        q = queue.Queue()
        threading.Thread(target=lambda: q.put(w.read(stream, wait_ms=5000)), daemon=True).start()
        return q

    def test_unknown_stream(self):
        env = self.front.workers["py-0"].read(424242)
        self.assertEqual(env.error.code, pb.Error.NOT_FOUND)

    def test_bound(self):
        f = sdkfront.Front(app, workers=1, log=self.log, max_streams=1)
        try:
            gate = threading.Event()
            self.body("/one", [b"a", gate, b"b"])
            r = f.request(sdkfront.Browser(), "GET", "/one")
            self.assertNotEqual(r.stream, 0)
            for _ in range(2):
                self.body("/two", [b"a", 0.1, b"b"])
                r2 = f.request(sdkfront.Browser(), "GET", "/two")
                self.assertEqual((r2.body, r2.stream), (b"ab", 0))
            self.assertEqual(len(self.log.find("warn", "bound")), 1)
            gate.set()
            self.assertEqual(f.read_all(r), (b"b", ""))
            # The producer is done: its place is free.
            deadline = time.monotonic() + 2
            while f.workers["py-0"].rt._streams._producing and time.monotonic() < deadline:
                time.sleep(0.01)
            self.body("/two", [b"a", 0.1, b"b"])
            r3 = f.request(sdkfront.Browser(), "GET", "/two")
            self.assertNotEqual(r3.stream, 0)
            self.assertEqual(f.read_all(r3), (b"b", ""))
        finally:
            f.close()

    def test_idle_stream_is_canceled(self):
        f = self.front
        gate = threading.Event()
        endless = itertools.chain([b"a", gate], itertools.repeat(b"x" * CHUNK))
        with mock.patch.object(streams, "STREAM_IDLE", 0.2):
            b = self.body("/idle", endless)
            r = f.request(sdkfront.Browser(), "GET", "/idle")
            self.assertNotEqual(r.stream, 0)
            gate.set()  # it fills the buffer and waits for a read that never comes
            self.assertTrue(b.closed.wait(3))
        self.assertEqual(b.closes, 1)
        self.assertEqual(f.read(r).error.code, pb.Error.NOT_FOUND)
        self.assertEqual(len(self.log.find("warn", "nobody read")), 1)


@unittest.skipIf(flask is None, "python3-flask is not installed")
class FlaskStreamTest(unittest.TestCase):
    def test_stream_with_context(self):
        from flask import Flask, Response, request, stream_with_context
        fapp = Flask("streams")

        @fapp.get("/plain")
        def plain():
            return "hello"

        @fapp.get("/stream")
        def stream():
            def gen():
                yield "a"
                time.sleep(0.2)
                yield request.args["x"]  # the request's context lives on

            return Response(stream_with_context(gen()), mimetype="text/plain")

        f = sdkfront.Front(fapp, workers=1)
        try:
            br = sdkfront.Browser()
            r = f.request(br, "GET", "/plain")
            self.assertEqual((r.status, r.body, r.stream), (200, b"hello", 0))
            r = f.request(br, "GET", "/stream?x=b")
            self.assertEqual((r.status, r.body), (200, b"a"))
            self.assertNotEqual(r.stream, 0)
            self.assertEqual(f.read_all(r), (b"b", ""))
        finally:
            f.close()


if __name__ == "__main__":
    unittest.main()
