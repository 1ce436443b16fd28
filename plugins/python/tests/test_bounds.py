"""A page's state, its person's pages and the pages open are bounded in a
Python worker as in a Go one (the group's WorkerLimits over the Go SDK's
defaults): a write past a bound raises StateTooLarge (the page sees the
handler's error), an open past a count is refused, and the probe counts
both."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import sdkfront  # noqa: E402

import stickyd  # noqa: E402
from stickyd import stickyd_pb2 as pb  # noqa: E402
from stickyd.runtime import Hooks  # noqa: E402


def app(environ, start_response):
    if environ["PATH_INFO"] == "/login":
        stickyd.session().login(environ["QUERY_STRING"].partition("=")[2])
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def message(page, msg):
    if msg["op"] == "fill":
        page.tree.set(msg.get("path", "blob"), "x" * msg["bytes"])
        return page.tree.size
    if msg["op"] == "drop":
        page.tree.delete(msg.get("path", "blob"))
        return page.tree.size


class BoundsTest(unittest.TestCase):
    def setUp(self):
        self.f = sdkfront.Front(app, workers=1, hooks=Hooks(open_page=lambda page: None, message=message))
        self.addCleanup(self.f.close)
        self.w = next(iter(self.f.workers.values()))
        self.w.rt.set_limits(pb.WorkerLimits(max_page_bytes=1000, max_person_bytes=1500,
                                             max_pages_per_conn=2, max_pages_per_person=3))
        self.b = sdkfront.Browser()
        self.f.request(self.b, "GET", "/")
        self.f.request(self.b, "POST", "/login?user=bo")

    def probe(self):
        return self.w.call(probe=pb.Probe()).probe_reply

    def test_page_and_person_bytes(self):
        self.f.open(self.b, "p1")
        self.assertLess(self.f.message(self.b, "p1", {"op": "fill", "bytes": 900}), 1000)
        with self.assertRaisesRegex(AssertionError, "the page.s state would be .* at most 1000 are allowed per page"):
            self.f.message(self.b, "p1", {"op": "fill", "path": "more", "bytes": 200})
        # The refused write left nothing behind: the page still holds 900.
        self.assertLess(self.f.message(self.b, "p1", {"op": "drop", "path": "more"}), 1000)
        self.f.open(self.b, "p2")
        with self.assertRaisesRegex(AssertionError, "this person.s pages would hold .* at most 1500 are allowed per person"):
            self.f.message(self.b, "p2", {"op": "fill", "bytes": 700})
        # Room made on one page is room for the other.
        self.f.message(self.b, "p1", {"op": "drop"})
        self.f.message(self.b, "p2", {"op": "fill", "bytes": 700})
        self.assertEqual(self.probe().state_refused, 2)

    def test_pages_open(self):
        self.f.open(self.b, "p1")
        self.f.open(self.b, "p2")
        with self.assertRaisesRegex(AssertionError, "this connection has 2 pages open, the most it may"):
            self.f.open(self.b, "p3")
        # Another browser of the same person: the person's bound.
        b2 = sdkfront.Browser()
        self.f.request(b2, "GET", "/")
        self.f.request(b2, "POST", "/login?user=bo")
        self.f.open(b2, "q1")
        with self.assertRaisesRegex(AssertionError, "this person has 3 pages open, the most they may"):
            self.f.open(b2, "q2")
        self.assertEqual(self.probe().pages_refused, 2)

    def test_no_bound(self):
        self.w.rt.set_limits(pb.WorkerLimits(max_page_bytes=-1, max_person_bytes=-1))
        self.f.open(self.b, "p1")
        self.f.message(self.b, "p1", {"op": "fill", "bytes": 5000})


if __name__ == "__main__":
    unittest.main()
