"""Unit tests of the Python SDK: python3 -m unittest discover -s plugins/python/tests
(test/e2e/python_test.go runs them too)."""

import json
import os
import queue
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import stickyd  # noqa: E402
from stickyd import stickyd_pb2 as pb  # noqa: E402
from stickyd.collector import MAX_PENDING, Collector, Scheduler  # noqa: E402
from stickyd import runtime as runtime_mod  # noqa: E402
from stickyd.runtime import Hooks, Runtime  # noqa: E402
from stickyd.tree import Tree, encode_value  # noqa: E402


class TreeTest(unittest.TestCase):
    def test_paths_and_deltas(self):
        got = []
        t = Tree(lambda op, path, v: got.append((op, path, v)))
        t.set("grid/filter", "abc")
        t.set("rows", [1, {"x": 2}])
        t.set("rows/1/x", 3)
        self.assertEqual(t.get("rows/1/x"), 3)
        self.assertEqual(t.string("grid/filter"), "abc")
        self.assertEqual(t.number("missing"), 0)
        t.delete("grid/filter")
        t.delete("grid/filter")  # not there: no delta
        self.assertEqual([(op, p) for op, p, _ in got], [(0, "grid/filter"), (0, "rows"), (0, "rows/1/x"), (1, "grid/filter")])
        self.assertEqual(got[1][2], b'[1,{"x":2}]')
        with self.assertRaises(stickyd.BadPath):
            t.set("rows/5", 1)
        with self.assertRaises(stickyd.NotData):
            t.set("f", object())
        with self.assertRaises(stickyd.BadPath):
            t.set("", [1])

    def test_codec_matches_go(self):
        # plugins/worker/codec.go's encoding of {"a": [1, "x", true, null]}.
        want = b"m\x01\x01a" + b"a\x04" + b"d\x00\x00\x00\x00\x00\x00\xf0?" + b"s\x01x" + b"t" + b"n"
        self.assertEqual(encode_value({"a": [1, "x", True, None]}), want)
        t = Tree()
        t.load(want)
        self.assertEqual(t.get(""), {"a": [1, "x", True, None]})
        t.set("b", {"c": 1.5, "d": "é"})
        u = Tree()
        u.load(t.encode())
        self.assertEqual(u.get(""), t.get(""))
        for bad in (b"m\x05", b"s\xff\xff\xff\xff\x0f", b"a\x02n", b"q"):
            with self.assertRaises(ValueError):
                Tree().load(bad)


class CollectorTest(unittest.TestCase):
    def setUp(self):
        self.sched = Scheduler()
        self.tree = Tree()
        self.c = Collector(self.sched, self.tree.snapshot)

    def tearDown(self):
        self.sched.stop()

    def test_long_poll(self):
        got = queue.Queue()
        self.c.pull(0, 5, lambda ds, last: got.put(([d.seq for d in ds], last)))
        self.c.add(pb.Delta.SET, "a", b"1")
        self.assertEqual(got.get(timeout=2), ([1], 1))
        self.c.pull(1, 0.05, lambda ds, last: got.put(([d.seq for d in ds], last)))
        self.assertEqual(got.get(timeout=2), ([], 1))

    def test_second_reader_gets_a_reset(self):
        # A duplicated tab: one reader acknowledged what the other has not
        # applied; the other's pull gets the whole tree.
        got = []
        for i in range(5):
            self.tree.set("n%d" % i, i)
            self.c.add(pb.Delta.SET, "n%d" % i, b"1")
        self.c.pull(0, 0, lambda ds, last: got.append(ds))
        self.c.pull(5, 0, lambda ds, last: got.append(ds))
        self.c.pull(2, 0, lambda ds, last: got.append(ds))
        ds = got[-1]
        self.assertEqual(len(ds), 1)
        self.assertEqual(ds[0].op, pb.Delta.RESET)
        self.assertGreater(ds[0].seq, 5)
        # A reader with every delta held gets no RESET.
        last = self.c.last()
        self.c.add(pb.Delta.SET, "n6", b"1")
        self.c.pull(last, 0, lambda ds, l: got.append(ds))
        self.assertEqual([d.op for d in got[-1]], [pb.Delta.SET])

    def test_message_deltas_travel_together(self):
        got = queue.Queue()
        self.c.pull(0, 5, lambda ds, last: got.put([d.seq for d in ds]))
        self.c.hold()
        for _ in range(3):
            self.c.add(pb.Delta.SET, "k", b"1")
        self.assertTrue(got.empty())
        self.c.release()
        self.assertEqual(got.get(timeout=2), [1, 2, 3])
        # A long message still streams: HOLD_MAX after its first write.
        self.c.pull(3, 5, lambda ds, last: got.put([d.seq for d in ds]))
        self.c.hold()
        self.c.add(pb.Delta.SET, "k", b"2")
        self.assertEqual(got.get(timeout=2), [4])
        self.c.release()

    def test_bounded(self):
        for i in range(MAX_PENDING + 1):
            self.c.add(pb.Delta.SET, "p%d" % (i % 10), b"1")
        seq, floor, pending = self.c.state()
        self.assertEqual(seq, MAX_PENDING + 1)
        self.assertEqual(len(pending), 10)


def app(environ, start_response):
    s = stickyd.session()
    assert environ["stickyd.session"] is s
    if environ["PATH_INFO"] == "/login":
        s.login(environ["QUERY_STRING"].partition("=")[2])
    if environ["PATH_INFO"] == "/name":
        s.name_connection(environ["QUERY_STRING"].partition("=")[2])
    items = list(s.values.get("cart", [])) + [environ["PATH_INFO"]]
    s.values.set("cart", items)
    start_response("200 OK", [("content-type", "application/json")])
    return [json.dumps({"conn": s.conn, "user": s.user, "items": items, "body": environ["wsgi.input"].read().decode()}).encode()]


def open_page(page):
    page.tree.set("count", 0)


def message(page, msg):
    n = page.tree.number("count") + 1
    page.tree.set("count", n)
    return n


class Worker:
    """A runtime on a fake channel."""

    def __init__(self, worker_id, schemas=None):
        self.out = queue.Queue()
        self.rt = Runtime(app, Hooks(open_page=open_page, message=message, schemas=schemas), self.out.put, _NullLog(), name="t")
        self.rt.worker_id = worker_id
        self.next = 100

    def call(self, **body):
        self.next += 1
        self.rt.handle(pb.Envelope(id=self.next, **body))
        while True:
            env = self.out.get(timeout=5)
            if env.id == self.next:
                return env

    def frame(self, user, conn, epoch=0, **kind):
        return self.call(frame=pb.Frame(user=user, conn=conn, epoch=epoch, **kind))


class _NullLog:
    def __getattr__(self, name):
        return lambda *a, **kv: None


class RuntimeTest(unittest.TestCase):
    def test_session_page_move(self):
        a, b = Worker("py-1"), Worker("py-2")
        try:
            r = a.frame("", "", http=pb.HTTPRequest(method="POST", url="/login?user=ana", body=b"hi", remote_addr="1.2.3.4:5")).frame_reply
            self.assertEqual(r.http.status, 200)
            self.assertEqual(r.identity.user, "ana")
            conn = r.identity.conn
            body = json.loads(r.http.body)
            self.assertEqual((body["user"], body["body"]), ("ana", "hi"))
            self.assertEqual([h.name for h in r.http.headers], ["Content-Type"])
            self.assertEqual(a.frame("ana", conn, 1, open=pb.PageOpen(page="p1", kind="counter")).frame_reply.opened.seq, 1)
            for _ in range(3):
                a.frame("ana", conn, 1, message=pb.PageMessage(page="p1", data=b'{"op":"inc"}'))
            ds = a.frame("ana", conn, 1, pull=pb.PagePull(page="p1", after=1)).frame_reply.deltas
            self.assertEqual([d.seq for d in ds.deltas], [2, 3, 4])
            usage = {u.user: u for u in a.call(probe=pb.Probe()).probe_reply.per_user}
            self.assertEqual((usage["ana"].frames, usage["ana"].pages), (5, 1))
            self.assertGreater(usage["ana"].state_bytes, 0)
            fz = a.call(freeze=pb.Freeze(user="ana", epoch=2)).frozen
            self.assertEqual((fz.conns, fz.pages, fz.absent), (1, 1, False))
            self.assertEqual(a.frame("ana", conn, 2, message=pb.PageMessage(page="p1", data=b"{}")).error.code, pb.Error.MOVED)
            a.call(evict=pb.Evict(user="ana"))
            probe = a.call(probe=pb.Probe()).probe_reply
            self.assertEqual((probe.users, probe.conns, probe.pages, list(probe.left)), (0, 0, 0, ["ana"]))
            self.assertEqual(b.call(wake=pb.Wake(user="ana", epoch=2, package=fz.package)).woken.pages, 1)
            self.assertEqual(json.loads(b.frame("ana", conn, 2, message=pb.PageMessage(page="p1", data=b"{}")).frame_reply.message.data), 4)
            ds = b.frame("ana", conn, 2, pull=pb.PagePull(page="p1", after=4)).frame_reply.deltas
            self.assertEqual([(d.seq, d.value) for d in ds.deltas], [(5, b"4")])
            cart = json.loads(b.frame("ana", conn, 2, http=pb.HTTPRequest(method="GET", url="/cart")).frame_reply.http.body)["items"]
            self.assertEqual(cart, ["/login", "/cart"])
        finally:
            a.rt.close()
            b.rt.close()

    def test_message_runs_once(self):
        """A message sent again with its msg_id is answered from the page's
        memory, on its worker and after a move."""
        a, b = Worker("py-1"), Worker("py-2")
        try:
            conn = a.frame("", "", http=pb.HTTPRequest(method="GET", url="/")).frame_reply.identity.conn
            u = "~" + conn
            a.frame(u, conn, 1, open=pb.PageOpen(page="p", kind="counter"))
            send = lambda w, epoch, mid: json.loads(w.frame(u, conn, epoch, message=pb.PageMessage(page="p", data=b"{}", msg_id=mid)).frame_reply.message.data)
            self.assertEqual((send(a, 1, "m1"), send(a, 1, "m1"), send(a, 1, "m2")), (1, 1, 2))
            fz = a.call(freeze=pb.Freeze(user=u, epoch=2)).frozen
            b.call(wake=pb.Wake(user=u, epoch=2, package=fz.package))
            self.assertEqual((send(b, 2, "m2"), send(b, 2, "m3")), (2, 3))
        finally:
            a.rt.close()
            b.rt.close()

    def test_name_taken(self):
        """A newcomer named after a connection the worker holds is refused
        (kind conn_taken) and the holder keeps its state."""
        a = Worker("py-1")
        try:
            r = a.frame("", "", http=pb.HTTPRequest(method="GET", url="/name?conn=victim-1")).frame_reply
            self.assertEqual(r.identity.conn, "victim-1")
            e = a.frame("", "", http=pb.HTTPRequest(method="GET", url="/name?conn=victim-1")).error
            self.assertEqual((e.code, e.kind), (pb.Error.BAD_REQUEST, "conn_taken"))
            cart = json.loads(a.frame("~victim-1", "victim-1", 1, http=pb.HTTPRequest(method="GET", url="/cart")).frame_reply.http.body)["items"]
            self.assertEqual(cart, ["/name", "/cart"])
        finally:
            a.rt.close()

    def test_fences_and_parked_here(self):
        a = Worker("py-1")
        try:
            def person():
                conn = a.frame("", "", http=pb.HTTPRequest(method="GET", url="/")).frame_reply.identity.conn
                user = "~" + conn
                a.frame(user, conn, 1, open=pb.PageOpen(page="p", kind="counter"))
                a.frame(user, conn, 1, message=pb.PageMessage(page="p", data=b'{"op":"inc"}'))
                return user, conn
            # Parked where she lives, her next frame before the eviction:
            # the wake at the freeze's epoch wakes her from the package, and
            # the late eviction drops nobody.
            ann, ann_conn = person()
            fz = a.call(freeze=pb.Freeze(user=ann, epoch=2)).frozen
            self.assertFalse(a.call(wake=pb.Wake(user=ann, epoch=2, package=fz.package)).HasField("error"))
            a.call(evict=pb.Evict(user=ann))
            r = a.frame(ann, ann_conn, 2, message=pb.PageMessage(page="p", data=b'{"op":"inc"}'))
            self.assertFalse(r.HasField("error"), r)
            # An evicted person stays fenced until TOMBSTONE_TTL; a
            # forgotten one is let go at once.
            bob, _ = person()
            cy, _ = person()
            for u, forget in ((bob, False), (cy, True)):
                a.call(freeze=pb.Freeze(user=u, epoch=2))
                a.call(evict=pb.Evict(user=u, forget=forget))
            self.assertIn(bob, a.rt._epochs)
            self.assertNotIn(cy, a.rt._epochs)
            with a.rt._mu:
                a.rt._tidy_locked(time.monotonic() + runtime_mod.TOMBSTONE_TTL)
            self.assertNotIn(bob, a.rt._epochs)
            self.assertNotIn(bob, a.rt._frozen)
            self.assertEqual(a.rt._evicted, {})
        finally:
            a.rt.close()

    def test_version_rule(self):
        a, b = Worker("py-1", {"counter": 1}), Worker("py-2", {"counter": 2})
        try:
            conn = a.frame("", "", http=pb.HTTPRequest(method="GET", url="/")).frame_reply.identity.conn
            user = "~" + conn
            a.frame(user, conn, open=pb.PageOpen(page="p", kind="counter"))
            a.frame(user, conn, message=pb.PageMessage(page="p", data=b"{}"))
            fz = a.call(freeze=pb.Freeze(user=user, epoch=1)).frozen
            self.assertEqual(b.call(wake=pb.Wake(user=user, epoch=1, package=fz.package)).woken.reset_pages, 1)
            ds = b.frame(user, conn, 1, pull=pb.PagePull(page="p", after=2)).frame_reply.deltas.deltas
            self.assertEqual((ds[0].op, ds[0].notice != "", json.loads(ds[0].value)), (pb.Delta.RESET, True, {"count": 0}))
        finally:
            a.rt.close()
            b.rt.close()


if __name__ == "__main__":
    unittest.main()
