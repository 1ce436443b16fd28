"""A Python worker's probe figures (usage.py), as the Go SDK's probe means
them for governance (docs/governance.md): the live heap (what objects hold
now, falling when they are freed, unlike RSS), RSS, CPU seconds and
threads; and the memory of people who left, collected and given back."""

import gc
import os
import random
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import sdkfront  # noqa: E402
from stickyd import runtime, usage  # noqa: E402
from stickyd import stickyd_pb2 as pb  # noqa: E402
from stickyd.runtime import Hooks  # noqa: E402

MiB = 1 << 20


def app(environ, start_response):
    import stickyd
    s = stickyd.session()
    if environ["PATH_INFO"] == "/login":
        s.login(environ["QUERY_STRING"].partition("=")[2])
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def message(page, msg):
    # "fill": n strings of size bytes each, at their own paths.
    for i in range(msg["n"]):
        page.tree.set("rows/%d" % i, "%07d" % i + "x" * (msg["size"] - 7))
    return msg["n"]


HOOKS = Hooks(open_page=lambda page: None, message=message)


@unittest.skipIf(usage.malloc_bytes() is None, "no glibc mallinfo2: the heap is the RSS")
class HeapTest(unittest.TestCase):
    def test_heap_follows_what_objects_hold(self):
        gc.collect()
        before = usage.heap_bytes()
        small = [b"%08d" % i + b"s" * 92 for i in range(300000)]  # pymalloc's blocks
        large = [bytearray(MiB) for _ in range(20)]  # the C allocator's
        want = 300000 * 133 + 20 * MiB  # sys.getsizeof of each
        grown = usage.heap_bytes() - before
        self.assertGreater(grown, 0.9 * want, "grew %.1f MiB for %.1f MiB of objects" % (grown / MiB, want / MiB))
        self.assertLess(grown, 1.5 * want, "grew %.1f MiB for %.1f MiB of objects" % (grown / MiB, want / MiB))
        # Half the small objects freed, scattered: their pages stay
        # resident (RSS barely moves) but the heap falls by what they held.
        random.seed(1)
        random.shuffle(small)
        rss = usage.rss_bytes()
        heap = usage.heap_bytes()
        del small[::2]
        heap_fell, rss_fell = heap - usage.heap_bytes(), rss - usage.rss_bytes()
        self.assertGreater(heap_fell, 0.8 * 150000 * 133)
        self.assertLess(rss_fell, heap_fell / 2)
        del small, large
        self.assertLess(usage.heap_bytes() - before, 2 * MiB)

    def test_both_parts_are_read(self):
        self.assertIsNotNone(usage.pymalloc_bytes())  # this interpreter's pymalloc statistics
        self.assertGreater(usage.pymalloc_bytes(), 0)
        self.assertGreater(usage.malloc_bytes(), 0)
        self.assertEqual(usage.heap_bytes() // MiB, (usage.pymalloc_bytes() + usage.malloc_bytes()) // MiB)

    def test_cheap(self):
        junk = [{"i": i, "s": "x" * (i % 300)} for i in range(200000)]
        began = time.perf_counter()
        for _ in range(20):
            usage.heap_bytes()
        each = (time.perf_counter() - began) / 20
        self.assertLess(each, 0.02, "a heap reading took %.1f ms" % (each * 1e3))
        del junk


class ProcessTest(unittest.TestCase):
    def test_threads(self):
        n = usage.threads()
        self.assertGreaterEqual(n, threading.active_count())
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        try:
            self.assertEqual(usage.threads(), n + 1)
        finally:
            stop.set()
            t.join()

    def test_cpu_seconds(self):
        before = usage.cpu_seconds()
        end = time.process_time() + 0.2
        while time.process_time() < end:
            pass
        self.assertGreaterEqual(usage.cpu_seconds() - before, 0.15)

    def test_rss(self):
        rss = usage.rss_bytes()
        self.assertGreater(rss, 10 * MiB)
        with open("/proc/self/status") as f:
            vmrss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        self.assertLess(abs(rss - vmrss), 2 * MiB)


class ProbeTest(unittest.TestCase):
    def setUp(self):
        self.f = sdkfront.Front(app, workers=1, hooks=HOOKS)
        self.addCleanup(self.f.close)

    def probe(self):
        return self.f.workers["py-0"].call(probe=pb.Probe()).probe_reply

    def test_the_fields(self):
        r = self.probe()
        self.assertGreater(r.cpu_seconds, 0)
        self.assertGreater(r.rss_bytes, 0)
        self.assertGreater(r.heap_bytes, 0)
        self.assertNotEqual(r.heap_bytes, r.rss_bytes)  # not the RSS, as it was
        self.assertLess(abs(r.goroutines - usage.threads()), 2)
        self.assertGreaterEqual(r.goroutines, 2)  # this one and the worker's timer thread at least

    @unittest.skipIf(usage.malloc_bytes() is None, "no glibc mallinfo2: the heap is the RSS")
    def test_people_who_left_are_given_back(self):
        old = runtime.RELEASE_MIN, runtime.RELEASE_EVERY
        runtime.RELEASE_MIN, runtime.RELEASE_EVERY = 0.05, 0.5
        self.addCleanup(lambda: setattr(runtime, "RELEASE_MIN", old[0]) or setattr(runtime, "RELEASE_EVERY", old[1]))
        releases = []
        real = usage.release
        usage.release = lambda: (releases.append(time.monotonic()), real())
        self.addCleanup(setattr, usage, "release", real)

        gc.collect()
        base = self.probe().heap_bytes
        b = sdkfront.Browser()
        self.f.request(b, "POST", "/login?user=maria")
        self.f.open(b, "p")
        self.f.message(b, "p", {"n": 20000, "size": 1000})  # ~20 MiB of tree
        self.f.pull(b, "p", 0)
        held = self.probe().heap_bytes - base
        self.assertGreater(held, 20 * MiB)
        # maria leaves (frozen and evicted, as after a move): her pages are
        # cycles, collected by the release that follows, within a second.
        w = self.f.workers["py-0"]
        fz = w.call(freeze=pb.Freeze(user="maria", epoch=1))
        self.assertTrue(fz.HasField("frozen"))
        del fz
        w.call(evict=pb.Evict(user="maria"))
        deadline = time.monotonic() + 3
        while not releases:
            self.assertLess(time.monotonic(), deadline, "no release after an eviction")
            time.sleep(0.01)
        time.sleep(0.05)
        left = self.probe().heap_bytes - base
        self.assertLess(left, held / 4, "after maria left: %.1f MiB of her %.1f MiB" % (left / MiB, held / MiB))
        # Another departure right after: one release per RELEASE_EVERY.
        for user in ("ana", "eva"):
            bb = sdkfront.Browser()
            self.f.request(bb, "POST", "/login?user=" + user)
            w.call(freeze=pb.Freeze(user=user, epoch=1))
            w.call(evict=pb.Evict(user=user))
        time.sleep(0.3)
        self.assertEqual(len(releases), 1)
        time.sleep(0.5)
        self.assertEqual(len(releases), 2)
        self.assertGreaterEqual(releases[1] - releases[0], 0.5)


if __name__ == "__main__":
    unittest.main()
