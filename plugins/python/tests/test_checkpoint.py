"""Crash checkpoints (stickyd/checkpoint.py): pieces of what changed,
increments of large pages, and a wake from them after a crash."""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from stickyd import stickyd_pb2 as pb  # noqa: E402
from stickyd.checkpoint import CHAIN_MIN, NOTICE_RESTORED  # noqa: E402
from test_precopy import Worker  # noqa: E402


def pieces_by_page(ck):
    return {(p.conn, p.page): p for p in ck.pieces}


def assemble(user, epoch, kept):
    """The UserPackage a host makes of a person's kept pieces (whole pages
    with their increments' writes as the page's journal)."""
    pkg = pb.UserPackage(format=1, user=user, epoch=epoch)
    conns = {}
    for (conn, page), chain in sorted(kept.items()):
        whole = pb.ConnPackage()
        whole.ParseFromString(chain[0].package)
        cp = conns.get(conn)
        if cp is None:
            cp = conns[conn] = pkg.conns.add(name=conn, user=whole.user)
        if page == "":
            cp.values = whole.values
            continue
        pp = cp.pages.add()
        pp.CopyFrom(whole.pages[0])
        for inc in chain[1:]:
            c = pb.ConnPackage()
            c.ParseFromString(inc.package)
            pp.journal.extend(c.pages[0].journal)
            pp.seq = c.pages[0].seq
    return pkg


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.a, self.b = Worker("py-1"), Worker("py-2")

    def tearDown(self):
        self.a.rt.close()
        self.b.rt.close()

    def open(self, w, user, conn, page):
        r = w.frame(user, conn, 1, open=pb.PageOpen(page=page, kind="grid"))
        self.assertFalse(r.HasField("error"), r)

    def send(self, w, user, conn, page, **msg):
        r = w.frame(user, conn, 1, message=pb.PageMessage(page=page, data=json.dumps(msg).encode()))
        self.assertFalse(r.HasField("error"), r)

    def test_only_what_changed(self):
        a = self.a
        conn = a.frame("", "", http=pb.HTTPRequest(method="GET", url="/")).frame_reply.identity.conn
        user = "~" + conn
        for p in ("p", "q"):
            self.open(a, user, conn, p)
        self.send(a, user, conn, "p", op="note", k="a", v=1)
        first = pieces_by_page(a.call(checkpoint=pb.Checkpoint()).checkpointed)
        self.assertEqual(set(first), {(conn, ""), (conn, "p"), (conn, "q")})
        self.assertEqual(len(a.call(checkpoint=pb.Checkpoint()).checkpointed.pieces), 0)
        self.send(a, user, conn, "q", op="note", k="b", v=2)
        second = a.call(checkpoint=pb.Checkpoint()).checkpointed
        self.assertEqual(list(pieces_by_page(second)), [(conn, "q")])
        # A closed page's pieces are to be dropped.
        a.frame(user, conn, 1, close=pb.PageClose(page="p"))
        third = a.call(checkpoint=pb.Checkpoint()).checkpointed
        self.assertEqual([(g.user, g.conn, g.page) for g in third.gone], [(user, conn, "p")])
        # A frozen person is not packaged: their package is the truth.
        self.send(a, user, conn, "q", op="note", k="c", v=3)
        a.call(freeze=pb.Freeze(user=user, epoch=2))
        self.assertEqual(len(a.call(checkpoint=pb.Checkpoint()).checkpointed.pieces), 0)

    def test_increments_and_a_wake_from_them(self):
        a, b = self.a, self.b
        conn = a.frame("", "", http=pb.HTTPRequest(method="POST", url="/")).frame_reply.identity.conn
        user = "~" + conn
        self.open(a, user, conn, "p")
        self.send(a, user, conn, "p", op="fill", n=100)  # about 100 KB: a chain
        kept = {}
        ck = pieces_by_page(a.call(checkpoint=pb.Checkpoint()).checkpointed)
        whole = ck[(conn, "p")]
        self.assertNotEqual(whole.chain, 0)
        self.assertEqual(whole.link, 0)
        self.assertGreater(len(whole.package), CHAIN_MIN)
        for k, v in ck.items():
            kept[k] = [v]
        for i in range(3):
            self.send(a, user, conn, "p", op="note", k="n%d" % i, v=i)
            inc = pieces_by_page(a.call(checkpoint=pb.Checkpoint()).checkpointed)[(conn, "p")]
            self.assertEqual((inc.chain, inc.link), (whole.chain, i + 1))
            self.assertLess(len(inc.package), 1024)
            kept[(conn, "p")].append(inc)
        # The host asks for the page whole: a new chain starts.
        self.send(a, user, conn, "p", op="edit", row="r3", v="edited")
        full = a.call(checkpoint=pb.Checkpoint(full=[pb.CheckpointKey(user=user, conn=conn, page="p")])).checkpointed
        again = pieces_by_page(full)[(conn, "p")]
        self.assertEqual(again.link, 0)
        self.assertNotEqual(again.chain, whole.chain)
        kept[(conn, "p")] = [again]
        self.send(a, user, conn, "p", op="drop", row="r4")
        kept[(conn, "p")].append(pieces_by_page(a.call(checkpoint=pb.Checkpoint()).checkpointed)[(conn, "p")])
        want = a.tree(user).get("")
        seq = a.frame(user, conn, 1, pull=pb.PagePull(page="p", after=0)).frame_reply.deltas.last

        # a dies; b wakes the person from the checkpoint.
        pkg = assemble(user, 1, kept)
        wk = b.call(wake=pb.Wake(user=user, epoch=1, package=pkg.SerializeToString(), checkpoint=True, generation=1))
        self.assertEqual(wk.woken.pages, 1)
        self.assertEqual(b.tree(user).get(""), want)
        st = b.frame(user, conn, 1, open=pb.PageOpen(page="p", kind="grid", after=seq)).frame_reply.opened
        self.assertEqual(st.notice, NOTICE_RESTORED)
        self.assertTrue(st.resync)
        self.assertGreaterEqual(st.seq, 1 << 32)


if __name__ == "__main__":
    unittest.main()
