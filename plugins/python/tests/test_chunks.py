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


class FramedTest(unittest.TestCase):
    def test_the_host_proves_itself_and_a_stranger_is_closed(self):
        import socket
        import threading
        from stickyd import framed
        offer = framed.Offer()
        hello = pb.Hello()
        offer.fill(hello)
        self.assertEqual(os.stat(os.path.dirname(hello.framed_socket)).st_mode & 0o777, 0o700)
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("conn", offer.take()))
        t.start()
        stranger = socket.socket(socket.AF_UNIX)
        stranger.connect(hello.framed_socket)
        stranger.sendall(b"x" * framed.TOKEN_BYTES)
        self.assertEqual(stranger.recv(1), b"")  # closed on it
        host = socket.socket(socket.AF_UNIX)
        host.connect(hello.framed_socket)
        host.sendall(bytes.fromhex(hello.framed_token))
        t.join(5)
        conn = got["conn"]
        self.assertFalse(os.path.exists(hello.framed_socket))
        # Envelopes both ways, length-prefixed.
        conn.send(pb.Envelope(id=3, reply=True, frozen=pb.Frozen(pages=2)))
        head = host.recv(4)
        body = b""
        while len(body) < int.from_bytes(head, "big"):
            body += host.recv(65536)
        self.assertEqual(pb.Envelope.FromString(body).frozen.pages, 2)
        data = pb.Envelope(id=4, probe=pb.Probe()).SerializeToString()
        host.sendall(len(data).to_bytes(4, "big") + data)
        self.assertEqual(conn.recv().id, 4)
        host.sendall((framed.MAX_ENVELOPE + 1).to_bytes(4, "big"))
        with self.assertRaises(framed.FramedError):
            conn.recv()
        host.close()
        conn.close()
