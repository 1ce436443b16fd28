"""stickyd.flask: the session interface keeping Flask's session in the
connection's values and the naming of the person (a user callable, as the
Flask tutorial's g.user needs, and Flask-Login's current_user), driven
through the SDK's runtime (sdkfront) with Flask from Debian (python3-flask,
python3-flask-login; skipped without them)."""

import datetime
import os
import sys
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import sdkfront  # noqa: E402

try:
    import flask
except ImportError:  # make deps installs python3-flask
    flask = None
try:
    import flask_login
except ImportError:
    flask_login = None

import stickyd  # noqa: E402


def tutorial_app():
    """The Flask tutorial's shape: session["user_id"], g.user loaded before
    each request, register, login, logout, and pages reading the session."""
    from flask import Flask, g, jsonify, redirect, request, session
    app = Flask("tutorial")
    app.config["SECRET_KEY"] = "dev"
    users = {}  # id -> {"id", "username", "password"}

    @app.before_request
    def load_logged_in_user():
        uid = session.get("user_id")
        g.user = users.get(uid) if uid is not None else None

    @app.post("/register")
    def register():
        uid = len(users) + 1
        users[uid] = {"id": uid, "username": request.form["username"], "password": request.form["password"]}
        return "registered"

    @app.post("/login")
    def login():
        u = next((u for u in users.values() if u["username"] == request.form["username"]), None)
        if u is None or u["password"] != request.form["password"]:
            return "no", 403
        session.clear()
        session["user_id"] = u["id"]
        session["notes"] = ["logged in"]
        if request.form.get("remember"):
            session.permanent = True
        return redirect("/whoami")

    @app.post("/logout")
    def logout():
        session.clear()
        return redirect("/whoami")

    @app.get("/whoami")
    def whoami():
        s = stickyd.session()
        return jsonify(user=g.user["username"] if g.user else "", person=s.user if s else "",
                       worker=s.worker_id if s else "", notes=session.get("notes", []))

    @app.get("/note")
    def note():
        session["notes"] = session.get("notes", []) + [request.args["text"]]
        return jsonify(notes=session["notes"])

    @app.get("/when")
    def when():  # a value only Flask's tagged serializer keeps
        session["at"] = datetime.datetime(2026, 12, 6, 10, 0, tzinfo=datetime.timezone.utc)
        session["pair"] = (1, b"\x00")
        return "ok"

    @app.get("/plain")
    def plain():
        return "plain"

    import stickyd.flask
    stickyd.flask.init_app(app, user=lambda: g.user["username"] if g.user else None)
    return app


def form(**kv):
    return urllib.parse.urlencode(kv).encode(), [("Content-Type", "application/x-www-form-urlencoded")]


@unittest.skipIf(flask is None, "Flask is not installed (make deps installs python3-flask)")
class FlaskTest(unittest.TestCase):
    def setUp(self):
        self.app = tutorial_app()
        self.front = sdkfront.Front(self.app)

    def tearDown(self):
        self.front.close()

    def register(self, b, name="ada"):
        body, hs = form(username=name, password="pw")
        self.assertEqual(self.front.request(b, "POST", "/register", body, hs).status, 200)

    def login(self, b, name="ada", **extra):
        """Logs in and follows the redirect, as a browser does."""
        body, hs = form(username=name, password="pw", **extra)
        r = self.front.request(b, "POST", "/login", body, hs)
        self.assertEqual(r.status, 302, r.body)
        return r, self.front.request(b, "GET", "/whoami")

    def test_login_names_the_person_and_the_session_lives_in_the_values(self):
        f, b = self.front, sdkfront.Browser()
        self.register(b)
        r, w = self.login(b)
        # The tutorial knows its user from the request after the login.
        self.assertEqual((r.identity.user, w.identity.user), ("", "ada"))
        self.assertEqual((w.json()["user"], w.json()["notes"]), ("ada", ["logged in"]))
        self.assertIn(".", b.cookies["session"])  # the login's response: ID.TOKEN
        for _ in range(3):
            self.assertEqual(f.request(b, "GET", "/whoami").json()["user"], "ada")
        self.assertEqual([u for u, _ in f.logins], ["ada"])  # once per connection
        sid = b.cookies["session"]
        self.assertNotIn(".", sid)  # then the bare id
        values = f.workers[f.home["ada"]].rt._conns[b.conn].values
        self.assertIn("user_id", values.get("flask/session/" + sid)["data"])  # Flask's tagged JSON, in the tree
        # A value only Flask's serializer keeps comes back as it was.
        f.request(b, "GET", "/when")
        self.assertEqual(f.request(b, "GET", "/note?text=x").json()["notes"], ["logged in", "x"])
        data = self.app.session_interface.serializer.loads(values.get("flask/session/" + sid)["data"])
        self.assertEqual((data["at"].year, data["pair"]), (2026, (1, b"\x00")))

    def test_second_browser_joins_the_person_with_its_session(self):
        f, a, b = self.front, sdkfront.Browser(), sdkfront.Browser()
        self.register(a)
        f.request(a, "GET", "/plain", place="py-0")
        self.login(a)
        f.request(b, "GET", "/plain", place="py-1")
        body, hs = form(username="ada", password="pw")
        f.request(b, "POST", "/login", body, hs)
        w = f.request(b, "GET", "/whoami")  # logs in here, on py-1: the person lives on py-0
        self.assertEqual((w.worker, w.identity.user), ("py-1", "ada"))
        self.assertIn(".", b.cookies["session"])  # the session travels in the cookie once
        w = f.request(b, "GET", "/whoami")
        self.assertEqual((w.worker, w.json()["user"], w.json()["notes"]), ("py-0", "ada", ["logged in"]))
        self.assertNotIn(".", b.cookies["session"])
        self.assertEqual(f.request(a, "GET", "/whoami").json()["user"], "ada")

    def test_session_moves_and_survives_a_restart(self):
        f, b = self.front, sdkfront.Browser()
        self.register(b)
        self.login(b)
        f.request(b, "GET", "/note?text=one")
        f.move("ada")
        w = f.request(b, "GET", "/whoami")
        self.assertEqual((w.worker, w.json()["user"], w.json()["notes"]), (f.home["ada"], "ada", ["logged in", "one"]))
        f.restart()
        w = f.request(b, "GET", "/whoami").json()
        self.assertEqual((w["user"], w["notes"]), ("ada", ["logged in", "one"]))

    def test_flask_behaviour(self):
        """permanent sets the cookie's expiry; an unmodified session sets
        no cookie; an emptied one deletes it; the logout rule applies."""
        f, b = self.front, sdkfront.Browser()
        self.register(b)
        body, hs = form(username="ada", password="pw")
        r = f.request(b, "POST", "/login", body, hs)
        self.assertNotIn("Expires", r.headers["Set-Cookie"][0])
        self.assertEqual(r.headers.get("Vary"), ["Cookie"])
        r = f.request(b, "GET", "/whoami")  # the login of the person: a hand-over
        self.assertIn("Set-Cookie", r.headers)
        r = f.request(b, "GET", "/whoami")  # the bare id again
        self.assertIn("Set-Cookie", r.headers)
        r = f.request(b, "GET", "/whoami")
        self.assertNotIn("Set-Cookie", r.headers)  # not modified, not permanent
        f.request(b, "GET", "/plain")
        body, hs = form(username="ada", password="pw", remember="1")
        r = f.request(b, "POST", "/login", body, hs)
        self.assertIn("Expires", r.headers["Set-Cookie"][0])
        r = f.request(b, "POST", "/logout")
        self.assertIn("Max-Age=0", r.headers["Set-Cookie"][0])
        self.assertNotIn("session", b.cookies)
        held = f.workers[f.home["ada"]].rt._conns[b.conn].values.get("flask/session")
        self.assertEqual(held, {})
        f.request(b, "GET", "/whoami")  # g.user is None: the logout is seen
        f.request(b, "GET", "/plain")
        self.assertEqual(f.forgotten, ["ada"])

    def test_outside_stickyd(self):
        """Under Flask's own test client (no stickyd) the app's signed
        cookie sessions serve."""
        c = self.app.test_client()
        c.post("/register", data={"username": "ada", "password": "pw"})
        c.post("/login", data={"username": "ada", "password": "pw"})
        self.assertEqual(c.get("/whoami").get_json()["user"], "ada")


def login_app():
    from flask import Flask, jsonify, request
    app = Flask("withlogin")
    app.config["SECRET_KEY"] = "dev"
    lm = flask_login.LoginManager(app)

    class User(flask_login.UserMixin):
        def __init__(self, name):
            self.id = name.upper()
            self.username = name

    @lm.user_loader
    def load(uid):
        return User(uid.lower())

    @app.post("/login")
    def login():
        flask_login.login_user(User(request.form["username"]))
        return "in"

    @app.post("/logout")
    def logout():
        flask_login.logout_user()
        return "out"

    @app.get("/me")
    def me():
        u = flask_login.current_user
        return jsonify(user=u.username if u.is_authenticated else "")

    @app.get("/plain")
    def plain():
        return "plain"

    import stickyd.flask
    stickyd.flask.init_app(app)
    return app


@unittest.skipIf(flask is None or flask_login is None, "Flask-Login is not installed (make deps installs python3-flask-login)")
class FlaskLoginTest(unittest.TestCase):
    def test_current_user_names_the_person(self):
        f, b = sdkfront.Front(login_app()), sdkfront.Browser()
        try:
            body, hs = form(username="cy")
            r = f.request(b, "POST", "/login", body, hs)
            self.assertEqual(r.identity.user, "cy")  # on the login's own response
            r = f.request(b, "GET", "/plain")  # current_user not loaded: nothing
            self.assertEqual(r.identity.user, "cy")
            f.move("cy")
            self.assertEqual(f.request(b, "GET", "/me").json()["user"], "cy")
            f.request(b, "POST", "/logout")
            f.request(b, "GET", "/plain")
            self.assertEqual(f.forgotten, ["cy"])
        finally:
            f.close()


if __name__ == "__main__":
    unittest.main()
