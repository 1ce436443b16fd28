"""A newcomer's request that names nobody leaves no trace (as the Go
SDK's leavesNoTrace): a HEAD, or a GET of a static asset or answered with an
error, whose handler did not touch the session, gets no identity (no
cookie), and the worker records no connection."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import sdkfront  # noqa: E402

import stickyd  # noqa: E402
from stickyd import stickyd_pb2 as pb  # noqa: E402


def app(environ, start_response):
    s = stickyd.session()
    path = environ["PATH_INFO"]
    if environ["QUERY_STRING"] == "keep":
        s.keep()
    if environ["QUERY_STRING"] == "write":
        s.values.set("seen", True)
    if path == "/missing":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"no"]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


class NoTraceTest(unittest.TestCase):
    def setUp(self):
        self.front = sdkfront.Front(app, workers=1)
        self.w = next(iter(self.front.workers.values()))

    def tearDown(self):
        self.front.close()

    def first(self, method, url):
        env = self.w.frame("", "", http=pb.HTTPRequest(method=method, url=url))
        self.assertFalse(env.HasField("error"), env)
        return env.frame_reply

    def conns(self):
        return self.w.call(probe=pb.Probe()).probe_reply.conns

    def test_requests_that_name_nobody(self):
        for method, url in [("HEAD", "/"), ("GET", "/static/site.css"), ("GET", "/favicon.ico?v=2"), ("GET", "/missing")]:
            r = self.first(method, url)
            self.assertEqual(r.identity.conn, "", "%s %s named a connection" % (method, url))
        self.assertEqual(self.conns(), 0)

    def test_requests_that_name_a_connection(self):
        for method, url in [("GET", "/"), ("POST", "/missing"), ("HEAD", "/?keep"), ("GET", "/app.js?write")]:
            r = self.first(method, url)
            self.assertNotEqual(r.identity.conn, "", "%s %s named no connection" % (method, url))
        self.assertEqual(self.conns(), 4)


if __name__ == "__main__":
    unittest.main()
