"""What the adapters share (stickyd.adapters), the SDK's pieces they stand
on (Session.forget, pending_login, connections) and the WSGI helper
stickyd.wsgi.identify, through the SDK's runtime (sdkfront)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import sdkfront  # noqa: E402

import stickyd  # noqa: E402
from stickyd import adapters  # noqa: E402
from stickyd import stickyd_pb2 as pb  # noqa: E402
from stickyd.wsgi import UNKNOWN, identify  # noqa: E402


def remote_user_app(environ, start_response):
    """A site behind an authenticating proxy: X-User is who it says."""
    s = stickyd.session()
    start_response("200 OK", [("Content-Type", "text/plain")])
    seen = s.values.get("seen", 0) + 1
    s.values.set("seen", seen)
    # The person before this request's login, if any, and what it saw.
    return [("%s %s %d" % (s.user, s.pending_login, seen)).encode()]


def user_of(environ):
    v = environ.get("HTTP_X_USER")
    if v == "?":
        return UNKNOWN
    return v or None


class IdentifyTest(unittest.TestCase):
    def setUp(self):
        self.front = sdkfront.Front(identify(remote_user_app, user_of, lambda env: {"via": "proxy"}))

    def tearDown(self):
        self.front.close()

    def test_names_once_keeps_unknown_and_logs_out(self):
        f, a = self.front, sdkfront.Browser()
        r = f.request(a, "GET", "/", headers=[("X-User", "ana")])
        self.assertEqual((r.identity.user, dict(r.identity.attributes)), ("ana", {"via": "proxy"}))
        self.assertEqual(r.body, b"  1")  # the app ran before the login was declared
        r = f.request(a, "GET", "/", headers=[("X-User", "ana")])
        self.assertEqual((r.body, dict(r.identity.attributes)), (b"ana  2", {}))
        self.assertEqual(f.request(a, "GET", "/", headers=[("X-User", "?")]).identity.user, "ana")
        self.assertEqual(len(f.logins), 1)
        # A second browser of ana joins her, with its values handed over by
        # nothing (the WSGI helper only names the person): it starts clean there.
        b = sdkfront.Browser()
        f.request(b, "GET", "/", place="py-1" if f.home["ana"] == "py-0" else "py-0")
        r = f.request(b, "GET", "/", headers=[("X-User", "ana")])
        self.assertNotEqual(r.worker, f.home["ana"])
        self.assertEqual(f.request(b, "GET", "/", headers=[("X-User", "ana")]).worker, f.home["ana"])
        # The logout rule: a's logout keeps ana (b is logged in), b's forgets her.
        f.request(a, "GET", "/")
        f.request(b, "GET", "/")
        f.request(b, "GET", "/")  # the notice, acted on before this request
        self.assertEqual(f.forgotten, ["ana"])
        self.assertNotIn("ana", f.home)

    def test_outside_stickyd(self):
        app = identify(lambda env, sr: (sr("200 OK", []), [b"ok"])[1], user_of)
        got = []
        out = app({"HTTP_X_USER": "ana"}, lambda *a: got.append(a))
        self.assertEqual(list(out), [b"ok"])
        out.close()  # no session: nothing named


class ForgetTest(unittest.TestCase):
    def test_forget_is_a_notice_after_the_answer_once(self):
        def app(environ, start_response):
            s = stickyd.session()
            if environ["PATH_INFO"] == "/login":
                s.login("eve")
                assert s.pending_login == "eve"
            if environ["PATH_INFO"] == "/bye":
                s.forget()
                s.forget()
            start_response("200 OK", [])
            return [("%d" % len(s.connections())).encode()]

        f, b = sdkfront.Front(app, workers=1), sdkfront.Browser()
        try:
            f.request(b, "GET", "/login")
            self.assertEqual(f.request(b, "GET", "/").body, b"1")
            w = f.workers["py-0"]
            w.frame("eve", b.conn, 0, http=pb.HTTPRequest(method="GET", url="/bye"))
            wid, env = f.notices.get(timeout=5)
            self.assertEqual((wid, env.WhichOneof("body"), env.forget.user, env.id), ("py-0", "forget", "eve", 0))
            w.frame("eve", b.conn, 0, http=pb.HTTPRequest(method="GET", url="/bye"))
            self.assertTrue(f.notices.empty())  # asked once per connection
        finally:
            f.close()


class NamesTest(unittest.TestCase):
    def test_person_name(self):
        self.assertEqual(adapters.person_name("ada.l@example.org"), "ada.l@example.org")
        for odd in ("José", "a b", "~x", "x" * 200, "a+b"):
            p = adapters.person_name(odd)
            self.assertRegex(p, r"^[A-Za-z0-9._@-]{1,128}$")
            self.assertFalse(p.startswith("~"))
            self.assertEqual(p, adapters.person_name(odd))
        self.assertNotEqual(adapters.person_name("a+b"), adapters.person_name("a b"))


if __name__ == "__main__":
    unittest.main()
