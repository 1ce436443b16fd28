"""Packages and envelopes in pieces (stickyd/chunks.py), as the Go SDK
sends and reads them (internal/channel/chunks.go)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from stickyd import stickyd_pb2 as pb  # noqa: E402
from stickyd.chunks import CHUNK_BYTES, ENVELOPE_PART, NOTICE_BIT, Assembler, ChunkError, split  # noqa: E402


class ChunksTest(unittest.TestCase):
    def test_large_package_goes_ahead_in_chunks(self):
        pkg = os.urandom(CHUNK_BYTES * 2 + 10)
        env = pb.Envelope(id=7, reply=True, frozen=pb.Frozen(package=pkg, pages=3))
        out = split(env)
        self.assertEqual([e.WhichOneof("body") for e in out], ["package_chunk"] * 3 + ["frozen"])
        self.assertEqual(out[0].package_chunk.total, len(pkg))
        self.assertEqual([e.package_chunk.total for e in out[1:3]], [0, 0])
        self.assertTrue(all(e.id == 7 and e.reply for e in out))
        self.assertEqual(out[-1].frozen.package, b"")
        a = Assembler()
        got = [g for g in (a.take(e) for e in out) if g is not None]
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0].frozen.package, pkg)
        self.assertEqual(got[0].frozen.pages, 3)

    def test_small_envelopes_go_whole(self):
        env = pb.Envelope(id=3, reply=True, frozen=pb.Frozen(package=b"x" * 100))
        self.assertEqual(split(env), [env])
        self.assertIs(Assembler().take(env), env)

    def test_both_packages_of_a_wake(self):
        a, b = os.urandom(CHUNK_BYTES + 1), os.urandom(CHUNK_BYTES * 3)
        env = pb.Envelope(id=9, wake=pb.Wake(user="u", package=a, base_package=b))
        out = split(env)
        parts = [e.package_chunk.part for e in out if e.WhichOneof("body") == "package_chunk"]
        self.assertEqual(parts, [0, 0, 1, 1, 1])
        asm = Assembler()
        got = [g for g in (asm.take(e) for e in out) if g is not None]
        self.assertEqual((got[0].wake.package, got[0].wake.base_package), (a, b))

    def test_large_notice_goes_as_pieces(self):
        env = pb.Envelope(publish=pb.Publish(table="t", data=b"d" * (CHUNK_BYTES * 2)))
        out = split(env)
        self.assertTrue(all(e.WhichOneof("body") == "package_chunk" for e in out))
        self.assertTrue(all(e.package_chunk.envelope and e.package_chunk.part == ENVELOPE_PART for e in out))
        self.assertTrue(out[0].id & NOTICE_BIT)
        asm = Assembler()
        got = [g for g in (asm.take(e) for e in out) if g is not None]
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0].id, 0)
        self.assertEqual(got[0].publish.data, env.publish.data)

    def test_interleaved_with_other_envelopes(self):
        pkg = os.urandom(CHUNK_BYTES * 2)
        out = split(pb.Envelope(id=5, wake=pb.Wake(user="u", package=pkg)))
        other = pb.Envelope(id=6, frame=pb.Frame(user="v"))
        asm = Assembler()
        self.assertIsNone(asm.take(out[0]))
        self.assertIs(asm.take(other), other)
        self.assertIsNone(asm.take(out[1]))
        self.assertEqual(asm.take(out[2]).wake.package, pkg)

    def test_bad_chunks_are_refused(self):
        asm = Assembler()
        with self.assertRaises(ChunkError):
            asm.take(pb.Envelope(id=1, package_chunk=pb.PackageChunk(data=b"x", total=1 << 40)))
        asm = Assembler()
        with self.assertRaises(ChunkError):  # envelope flag on a package's part
            asm.take(pb.Envelope(id=1, package_chunk=pb.PackageChunk(data=b"x", total=5, envelope=True, part=0)))
        asm = Assembler()
        asm.take(pb.Envelope(id=2, package_chunk=pb.PackageChunk(data=b"x", total=5, part=0)))
        with self.assertRaises(ChunkError):  # chunks for an envelope that carries no package
            asm.take(pb.Envelope(id=2, probe=pb.Probe()))
        asm = Assembler()
        with self.assertRaises(ChunkError):  # more than the total
            asm.take(pb.Envelope(id=3, package_chunk=pb.PackageChunk(data=b"xxxx", total=2, envelope=True, part=ENVELOPE_PART)))


if __name__ == "__main__":
    unittest.main()


class BatchTest(unittest.TestCase):
    def test_a_message_and_the_pull_it_woke_go_together(self):
        from test_precopy import Worker
        w = Worker("py-1")
        w.rt.batches = True
        try:
            conn = w.frame("", "", http=pb.HTTPRequest(method="GET", url="/")).frame_reply.identity.conn
            user = "~" + conn
            w.frame(user, conn, 1, open=pb.PageOpen(page="p", kind="grid"))
            w.rt.handle(pb.Envelope(id=1, frame=pb.Frame(user=user, conn=conn, epoch=1,
                                                         pull=pb.PagePull(page="p", after=0, wait_ms=5000))))
            w.rt.handle(pb.Envelope(id=2, frame=pb.Frame(user=user, conn=conn, epoch=1,
                                                         message=pb.PageMessage(page="p", data=b'{"op":"note","k":"a","v":1}'))))
            carrier = w.out.get(timeout=5)
            self.assertEqual(len(carrier.batch), 2, carrier)
            self.assertEqual([(e.id, e.WhichOneof("body")) for e in carrier.batch], [(1, "frame_reply"), (2, "frame_reply")])
            self.assertEqual(carrier.batch[0].frame_reply.deltas.deltas[0].path, "notes/a")
            # Without batches the two go one by one.
            w.rt.batches = False
            w.rt.handle(pb.Envelope(id=3, frame=pb.Frame(user=user, conn=conn, epoch=1,
                                                         pull=pb.PagePull(page="p", after=1, wait_ms=5000))))
            w.rt.handle(pb.Envelope(id=4, frame=pb.Frame(user=user, conn=conn, epoch=1,
                                                         message=pb.PageMessage(page="p", data=b'{"op":"note","k":"b","v":1}'))))
            self.assertEqual([w.out.get(timeout=5).id for _ in range(2)], [3, 4])
        finally:
            w.rt.close()
