"""Precopy (stickyd/precopy.py): a person copied ahead of their freeze, the
freeze sending each page's writes since, the wake replaying them on the
staged copy; and the trees' copy-on-write views it rests on."""

import copy
import json
import os
import queue
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from stickyd import stickyd_pb2 as pb  # noqa: E402
from stickyd.precopy import PRECOPY_MIN  # noqa: E402
from stickyd.runtime import Hooks, Refused, Runtime  # noqa: E402
from stickyd.tree import Tree  # noqa: E402


class _NullLog:
    def debug(self, *a, **k): pass
    def info(self, *a, **k): pass
    def warn(self, *a, **k): pass
    def error(self, *a, **k): pass


def app(environ, start_response):
    start_response("200 OK", [("content-type", "text/plain")])
    return [b"ok"]


def message(page, msg):
    op = msg.get("op")
    if op == "fill":  # n rows of 1 KB, each its own dict
        for i in range(msg["n"]):
            page.tree.set("rows/r%d" % i, {"text": "x" * 1000, "n": i})
    elif op == "note":
        page.tree.set("notes/%s" % msg["k"], msg["v"])
    elif op == "edit":  # a write deep in a shared row
        page.tree.set("rows/%s/text" % msg["row"], msg["v"])
    elif op == "drop":
        page.tree.delete("rows/%s" % msg["row"])
    elif op == "refuse":
        raise Refused(msg.get("text", ""), code=msg.get("code", ""), retry=msg.get("retry", False))
    return True


class Worker:
    def __init__(self, wid):
        self.out = queue.Queue()
        self.rt = Runtime(app, Hooks(message=message), self.out.put, _NullLog(), name="t")
        self.rt.worker_id = wid
        self.next = 100

    def call(self, **body):
        self.next += 1
        self.rt.handle(pb.Envelope(id=self.next, **body))
        while True:
            env = self.out.get(timeout=10)
            if env.id == self.next and env.reply:
                return env

    def frame(self, user, conn, epoch=0, **kind):
        return self.call(frame=pb.Frame(user=user, conn=conn, epoch=epoch, **kind))

    def send(self, user, conn, epoch, **msg):
        r = self.frame(user, conn, epoch, message=pb.PageMessage(page="p", data=json.dumps(msg).encode()))
        assert not r.HasField("error"), r
        return r

    def page(self, user):
        with self.rt._mu:
            s = next(iter(self.rt._by_user[user]))
        return s.pages["p"]

    def tree(self, user):
        return self.page(user).tree


class TreeViewTest(unittest.TestCase):
    def test_view_stays_as_it_was(self):
        t = Tree()
        t.set("a/b", {"c": [1, {"d": 2}]})
        t.set("e", 1)
        before = copy.deepcopy(t.get(""))
        root = t.view()
        t.set("a/b/c/1/d", 3)
        t.delete("e")
        t.set("f", {"g": 1})
        t.set("f/g", 2)
        self.assertEqual(root, before)
        self.assertEqual(t.get("a/b/c/1/d"), 3)
        self.assertEqual(t.get("f/g"), 2)
        self.assertIsNone(t.get("e"))
        # Once released, writes go in place again.
        t.release()
        inner = t.get("a/b")
        t.set("a/b/x", 1)
        t.set("a/b/y", 1)
        self.assertIs(t.get("a/b"), inner)

    def test_replay(self):
        t = Tree()
        t.set("a", {"b": 1})
        t.replay([pb.Delta(op=pb.Delta.SET, path="a/c", value=b'"x"'), pb.Delta(op=pb.Delta.DELETE, path="a/b")])
        self.assertEqual(t.get(""), {"a": {"c": "x"}})
        with self.assertRaises(ValueError):
            t.replay([pb.Delta(op=pb.Delta.SET, path="a", value=b"{bad")])


class PrecopyTest(unittest.TestCase):
    def person(self, w, rows):
        conn = w.frame("", "", http=pb.HTTPRequest(method="GET", url="/")).frame_reply.identity.conn
        user = "~" + conn
        w.frame(user, conn, 1, open=pb.PageOpen(page="p", kind="grid"))
        if rows:
            w.send(user, conn, 1, op="fill", n=rows)
        return user, conn

    def test_move_with_precopy(self):
        a, b, c = Worker("py-1"), Worker("py-2"), Worker("py-3")
        try:
            user, conn = self.person(a, 400)
            pc = a.call(precopy=pb.Precopy(user=user)).precopied
            self.assertFalse(pc.small)
            self.assertGreater(len(pc.package), PRECOPY_MIN)
            self.assertEqual(pc.pages, 1)
            # The person goes on while the copy travels: new writes, a write
            # inside a row the copy shares, a deleted row.
            for i in range(20):
                a.send(user, conn, 1, op="note", k="n%d" % i, v=i)
            a.send(user, conn, 1, op="edit", row="r5", v="edited")
            a.send(user, conn, 1, op="drop", row="r7")
            want = copy.deepcopy(a.tree(user).get(""))
            self.assertFalse(b.call(stage=pb.Stage(user=user, digest="d1", package=pc.package)).HasField("error"))
            fz = a.call(freeze=pb.Freeze(user=user, epoch=2, base=pc.base, base_digest="d1")).frozen
            self.assertEqual(fz.from_base, 1)
            self.assertLess(len(fz.package), len(pc.package) // 10)
            # A destination without the copy says so, and wakes when sent it.
            e = c.call(wake=pb.Wake(user=user, epoch=2, package=fz.package))
            self.assertEqual(e.error.code, pb.Error.NOT_FOUND)
            self.assertEqual(c.call(wake=pb.Wake(user=user, epoch=2, package=fz.package, base_package=pc.package)).woken.pages, 1)
            self.assertEqual(c.tree(user).get(""), want)
            # The staged copy serves the wake at b.
            self.assertEqual(b.call(wake=pb.Wake(user=user, epoch=2, package=fz.package)).woken.pages, 1)
            got = b.tree(user)
            self.assertEqual(got.get(""), want)
            self.assertGreater(got.size, 400_000)
            # The page's deltas, never pulled, arrive whole and in order at
            # the new home: the copy's (by sequence) and those since.
            ds = b.frame(user, conn, 2, pull=pb.PagePull(page="p", after=1)).frame_reply.deltas.deltas
            seqs = [d.seq for d in ds]
            self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))))
            self.assertEqual(ds[-1].path, "rows/r7")
            # A staged copy serves one wake.
            self.assertEqual(len(b.rt._staged), 0)
        finally:
            for w in (a, b, c):
                w.rt.close()

    def test_a_page_written_past_its_journal_goes_whole(self):
        a, b = Worker("py-1"), Worker("py-2")
        try:
            user, conn = self.person(a, 300)
            pc = a.call(precopy=pb.Precopy(user=user)).precopied
            a.page(user).journal.broken = True  # as past JOURNAL_MAX
            a.send(user, conn, 1, op="note", k="late", v=1)
            fz = a.call(freeze=pb.Freeze(user=user, epoch=2, base=pc.base, base_digest="d2")).frozen
            self.assertEqual(fz.from_base, 0)
            self.assertEqual(b.call(wake=pb.Wake(user=user, epoch=2, package=fz.package)).woken.pages, 1)
            self.assertEqual(b.tree(user).get("notes/late"), 1)
        finally:
            a.rt.close()
            b.rt.close()

    def test_small_person_is_not_copied(self):
        a = Worker("py-1")
        try:
            user, _ = self.person(a, 10)
            self.assertTrue(a.call(precopy=pb.Precopy(user=user)).precopied.small)
            self.assertTrue(a.call(precopy=pb.Precopy(user="nobody")).precopied.small)
        finally:
            a.rt.close()

    def test_bad_stage_is_refused(self):
        a = Worker("py-1")
        try:
            e = a.call(stage=pb.Stage(user="u", digest="d", package=b"\x01\x02garbage"))
            self.assertEqual(e.error.code, pb.Error.BAD_REQUEST)
            e = a.call(stage=pb.Stage(user="u", digest="d", package=pb.UserPackage(format=1, user="u").SerializeToString()))
            self.assertEqual(e.error.code, pb.Error.BAD_REQUEST)
        finally:
            a.rt.close()


if __name__ == "__main__":
    unittest.main()
