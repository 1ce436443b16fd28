"""stickyd.django: the middleware naming the person from Django's login and
the session engine keeping Django's session in the connection's values,
driven through the SDK's runtime (sdkfront) with Django from Debian
(python3-django; skipped without it)."""

import os
import shutil
import sys
import tempfile
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import sdkfront  # noqa: E402

try:
    import django
except ImportError:  # make deps installs python3-django
    django = None

import stickyd  # noqa: E402
from stickyd import adapters  # noqa: E402
from stickyd.session import Session, _Serving  # noqa: E402

_dir = None
application = None


def setUpModule():
    global _dir, application
    if django is None:
        raise unittest.SkipTest("Django is not installed (make deps installs python3-django)")
    from django.conf import settings  # not a module global: the test loader would read it
    _dir = tempfile.mkdtemp(prefix="stickyd-django-")
    if not settings.configured:
        settings.configure(
            SECRET_KEY="stickyd-tests-only",
            DEBUG=False,
            ALLOWED_HOSTS=["*"],
            INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes"],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(_dir, "db.sqlite3")}},
            MIDDLEWARE=[
                "django.contrib.sessions.middleware.SessionMiddleware",
                "django.contrib.auth.middleware.AuthenticationMiddleware",
                "stickyd.django.StickydMiddleware",
            ],
            SESSION_ENGINE="stickyd.django.session",
            ROOT_URLCONF=__name__,
            PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
            USE_TZ=True,
        )
    django.setup()
    from django.core.management import call_command
    call_command("migrate", verbosity=0)
    from django.contrib.auth.models import User
    User.objects.create_user("ada", password="pw", is_staff=True)
    User.objects.create_user("bo+b", password="pw")
    from django.core.wsgi import get_wsgi_application
    application = get_wsgi_application()


def tearDownModule():
    if _dir:
        shutil.rmtree(_dir, ignore_errors=True)


# The site: views of an ordinary Django app; none of them knows stickyd
# but /whoami, which reports where it ran.

def _views():
    from django.contrib import auth
    from django.http import HttpResponse, JsonResponse

    def login(request):
        user = auth.authenticate(request, username=request.POST["username"], password=request.POST["password"])
        if user is None:
            return HttpResponse("no", status=403)
        auth.login(request, user)
        request.session["notes"] = ["logged in"]
        return JsonResponse({"ok": True})

    def logout(request):
        auth.logout(request)
        return HttpResponse("bye")

    def whoami(request):
        s = stickyd.session()
        return JsonResponse({"user": request.user.get_username() if request.user.is_authenticated else "",
                             "person": s.user, "worker": s.worker_id, "notes": request.session.get("notes", [])})

    def note(request):
        request.session["notes"] = request.session.get("notes", []) + [request.GET["text"]]
        return JsonResponse({"notes": request.session["notes"]})

    def plain(request):
        return HttpResponse("plain")

    return login, logout, whoami, note, plain


def _urls():
    from django.urls import path
    login, logout, whoami, note, plain = _views()
    return [path("login", login), path("logout", logout), path("whoami", whoami), path("note", note),
            path("plain", plain)]


def __getattr__(name):  # ROOT_URLCONF's urlpatterns, made once Django is set up
    if name == "urlpatterns":
        global urlpatterns
        urlpatterns = _urls()
        return urlpatterns
    raise AttributeError(name)


def login(front, b, user="ada", place=None):
    form = urllib.parse.urlencode({"username": user, "password": "pw"}).encode()
    r = front.request(b, "POST", "/login", form, [("Content-Type", "application/x-www-form-urlencoded")], place=place)
    if r.status != 200:
        raise AssertionError("login: %d %s" % (r.status, r.body))
    return r


class DjangoTest(unittest.TestCase):
    def setUp(self):
        self.front = sdkfront.Front(application)

    def tearDown(self):
        self.front.close()

    def test_login_names_the_person_once(self):
        f, b = self.front, sdkfront.Browser()
        self.assertEqual(f.request(b, "GET", "/whoami").json()["person"], "")
        r = login(f, b)
        self.assertEqual((r.identity.user, dict(r.identity.attributes)), ("ada", {"is_staff": "true", "is_superuser": "false"}))
        self.assertEqual(f.conns[b.conn], "ada")
        for _ in range(3):
            w = f.request(b, "GET", "/whoami").json()
            self.assertEqual((w["user"], w["person"], w["notes"]), ("ada", "ada", ["logged in"]))
        self.assertEqual(len(f.logins), 1, f.logins)  # once per connection
        # A request that never looks at the user leaves the connection be,
        # and Django adds no Vary: Cookie for it.
        r = f.request(b, "GET", "/plain")
        self.assertEqual((r.status, r.identity.user, r.headers.get("Vary")), (200, "ada", None))
        # The cookie is the bare session key once the login's response is past.
        self.assertNotIn(".", b.cookies["sessionid"])

    def test_second_browser_joins_the_person_with_its_session(self):
        """A browser that logs in on the worker the person does not live on
        joins them there; its Django session, written where it logged in,
        follows in the cookie's hand-over."""
        f, a, b = self.front, sdkfront.Browser(), sdkfront.Browser()
        f.request(a, "GET", "/whoami", place="py-0")
        login(f, a)
        f.request(b, "GET", "/whoami", place="py-1")
        r = login(f, b)
        self.assertEqual(r.worker, "py-1")
        self.assertIn(".", b.cookies["sessionid"])  # the session travels in the cookie once
        w = f.request(b, "GET", "/whoami")
        self.assertEqual((w.worker, w.json()["user"], w.json()["notes"]), ("py-0", "ada", ["logged in"]))
        self.assertNotIn(".", b.cookies["sessionid"])
        self.assertEqual(f.request(b, "GET", "/note?text=b1").json()["notes"], ["logged in", "b1"])
        self.assertEqual([s.conn for s in f.workers["py-0"].rt.connections_of("ada")], sorted([a.conn, b.conn]))
        self.assertEqual(f.workers["py-1"].rt.connections_of("ada"), [])

    def test_session_moves_and_survives_a_restart(self):
        f, b = self.front, sdkfront.Browser()
        login(f, b)
        f.request(b, "GET", "/note?text=one")
        fz = f.move("ada")
        self.assertEqual(fz.conns, 1)
        w = f.request(b, "GET", "/whoami")
        self.assertEqual((w.worker, w.json()["user"], w.json()["notes"]), (f.home["ada"], "ada", ["logged in", "one"]))
        f.request(b, "GET", "/note?text=two")
        f.restart()
        w = f.request(b, "GET", "/whoami").json()
        self.assertEqual((w["user"], w["notes"]), ("ada", ["logged in", "one", "two"]))

    def test_logout(self):
        """A logout in one browser keeps the person (another browser is
        logged in); the last one's logout forgets them."""
        f, a, b = self.front, sdkfront.Browser(), sdkfront.Browser()
        login(f, a)
        login(f, b)
        # Its login's redirect, followed: the person's worker has seen the
        # connection (a worker knows the connections that reached it).
        self.assertEqual(f.request(b, "GET", "/whoami").json()["user"], "ada")
        self.assertEqual(f.request(a, "POST", "/logout").status, 200)
        self.assertNotIn("sessionid", a.cookies)
        self.assertEqual(f.request(a, "GET", "/whoami").json()["user"], "")
        self.assertEqual(f.forgotten, [])
        self.assertEqual(f.request(b, "GET", "/whoami").json()["user"], "ada")
        f.request(b, "POST", "/logout")
        f.request(b, "GET", "/plain")  # the front acts on the notice
        self.assertEqual(f.forgotten, ["ada"])
        self.assertNotIn("ada", f.home)
        # Its next request is a newcomer's, anonymous.
        w = f.request(b, "GET", "/whoami").json()
        self.assertEqual((w["user"], w["person"]), ("", ""))

    def test_a_name_stickyd_cannot_carry(self):
        f, b = self.front, sdkfront.Browser()
        r = login(f, b, "bo+b")
        self.assertRegex(r.identity.user, r"^bo_b\.[0-9a-f]{16}$")
        self.assertEqual(r.identity.user, adapters.person_name("bo+b"))
        self.assertEqual(f.request(b, "GET", "/whoami").json()["user"], "bo+b")


class SessionStoreTest(unittest.TestCase):
    """Django's SessionBase contract on the connection's values."""

    def setUp(self):
        from stickyd.django.session import SessionStore
        self.Store = SessionStore
        self.conn = Session(None, "c1", "")

    def test_contract(self):
        with _Serving(self.conn):
            s = self.Store()
            s["a"] = 1
            s.save()
            key = s.session_key
            self.assertTrue(s.exists(key))
            self.assertEqual(self.Store(key).load(), {"a": 1})
            with self.assertRaises(Exception):  # CreateError: the key is taken
                self.Store(key).save(must_create=True)
            s.cycle_key()
            self.assertNotEqual(s.session_key, key)
            self.assertFalse(s.exists(key))
            self.assertEqual(self.Store(s.session_key)["a"], 1)
            new = s.session_key
            s.flush()
            self.assertIsNone(s.session_key)
            self.assertFalse(s.exists(new))
            self.assertEqual(self.Store("no-such-key").load(), {})
            # Expired sessions are not loaded, and go.
            s = self.Store()
            s["b"] = 2
            s.set_expiry(1)
            s.save()
            self.assertEqual(self.Store(s.session_key).load(), {"b": 2, "_session_expiry": 1})
            e = self.conn.values.get("django/sessions/" + s.session_key)
            e["expiry"] = time.time() - 1
            self.conn.values.set("django/sessions/" + s.session_key, e)
            self.assertEqual(self.Store(s.session_key).load(), {})
            self.assertEqual(self.conn.values.get("django/sessions"), {})
        # The data moves: the values tree holds it (the package's).
        self.assertIsInstance(self.conn.values.get(""), dict)

    def test_handover_is_checked(self):
        """A hand-over restores only a fresh session signed by the site,
        for the person the connection now is."""
        from stickyd.django import session as engine
        ada = Session(None, "c2", "")
        with _Serving(ada):
            ada.login("ada")
            s = self.Store()
            s["x"] = "y"
            s.save()
            cookie = s.session_key
        self.assertIn(".", cookie)
        sid, token = adapters.split(cookie)
        for who, raw, want in (
            ("bob", cookie, {}),  # another person
            ("ada", sid + "." + token[:-2] + "xx", {}),  # a forged signature
            ("ada", cookie, {"x": "y"}),
        ):
            c = Session(None, "c3-" + who, who)
            with _Serving(c):
                self.assertEqual(self.Store(raw).load(), want, who)
        old = engine._unsign
        engine._unsign = lambda t: engine.signing.loads(t, salt=engine.SALT, max_age=-1)
        try:
            with _Serving(Session(None, "c4", "ada")):
                self.assertEqual(self.Store(cookie).load(), {})  # too old
        finally:
            engine._unsign = old

    def test_outside_stickyd(self):
        s = self.Store()
        s["k"] = "v"
        s.save()
        self.assertEqual(self.Store(s.session_key).load(), {"k": "v"})
        self.assertNotIn(".", s.session_key)


if __name__ == "__main__":
    unittest.main()
