"""A freeze's own bounds (Freeze.wait_ms, request_wait_ms) in the Python
runtime, as in the Go SDK: a freeze waits for the person's request in the
app up to request_wait, and is refused UNAVAILABLE past it (then runs
unanswered, undone by the mover's thaw)."""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import sdkfront  # noqa: E402

from stickyd import stickyd_pb2 as pb  # noqa: E402

GATE = threading.Event()
STARTED = threading.Event()


def app(environ, start_response):
    if environ["PATH_INFO"] == "/slow":
        STARTED.set()
        if not GATE.wait(10):
            raise AssertionError("the test never opened the gate")
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"done"]


class FreezeBoundsTest(unittest.TestCase):
    def setUp(self):
        GATE.clear()
        STARTED.clear()
        self.front = sdkfront.Front(app, workers=1)
        self.b = sdkfront.Browser()
        self.front.request(self.b, "GET", "/")
        self.user = self.front.conns[self.b.conn]
        self.w = next(iter(self.front.workers.values()))

    def tearDown(self):
        GATE.set()
        self.front.close()

    def _slow(self):
        """Starts /slow on the person's mailbox; returns its answer holder."""
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", self.front.request(self.b, "GET", "/slow")))
        t.start()
        self.assertTrue(STARTED.wait(5))
        return t, out

    def _freeze(self, epoch, wait_ms, request_wait_ms):
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("env", self.w.call(freeze=pb.Freeze(
            user=self.user, epoch=epoch, wait_ms=wait_ms, request_wait_ms=request_wait_ms))))
        t.start()
        return t, out

    def test_waits_for_the_request_within_request_wait(self):
        slow, got = self._slow()
        fz, out = self._freeze(1, 50, 5000)
        time.sleep(0.3)  # past wait_ms, the request still in the app
        self.assertNotIn("env", out)
        GATE.set()
        slow.join(5)
        fz.join(5)
        self.assertEqual(got["r"].body, b"done")
        self.assertTrue(out["env"].HasField("frozen"), out["env"])

    def test_refused_past_request_wait(self):
        slow, got = self._slow()
        began = time.monotonic()
        fz, out = self._freeze(1, 50, 200)
        fz.join(5)
        self.assertEqual(out["env"].error.code, pb.Error.UNAVAILABLE, out["env"])
        self.assertIn("did not finish", out["env"].error.message)
        self.assertLess(time.monotonic() - began, 3)
        GATE.set()
        slow.join(5)
        self.assertEqual(got["r"].body, b"done")
        # The late freeze ran unanswered; the mover's thaw undoes it and the
        # person goes on at the move's epoch.
        self.assertTrue(self.w.call(thaw=pb.Thaw(user=self.user, epoch=1)).HasField("thaw"))
        self.front.epochs[self.user] = 1
        self.assertEqual(self.front.request(self.b, "GET", "/").body, b"done")


if __name__ == "__main__":
    unittest.main()
