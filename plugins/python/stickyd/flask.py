"""stickyd for an unchanged Flask site: one line after the app is made.

    stickyd.flask.init_app(app)                          # Flask-Login's current_user
    stickyd.flask.init_app(app, user=lambda: g.user["username"] if g.user else None)
    stickyd.flask.init_app(app, user_loader=lambda request: request.remote_user)

init_app does two things:

* It installs StickydSessionInterface: Flask's session lives in the
  connection's values (flask/COOKIE_NAME/ID = {"data": Flask's tagged
  JSON, "expiry"}), so it moves with the person and survives restarts with
  them. The session cookie names the session (an id, no data), with Flask's
  behaviour kept: session.permanent (the cookie's and the session's expiry,
  PERMANENT_SESSION_LIFETIME), session.modified (only a modified session is
  stored, or a permanent one with SESSION_REFRESH_EACH_REQUEST), an emptied
  session deletes the cookie, Vary: Cookie, the SESSION_COOKIE_* settings.
  On the response whose request logs the connection in, the cookie carries
  the session too, signed with the app's SECRET_KEY ("ID.TOKEN"), for a
  connection that joins its person on another worker (stickyd.adapters).
  Outside stickyd (flask run) the app's previous interface (Flask's signed
  cookies) serves.
* It names the person after each request (before the session is saved):
  from user() (no arguments, in the request's context) if given, else
  user_loader(request), else Flask-Login's current_user (its .username,
  else get_id()) when Flask-Login is installed and the app has a
  login_manager, and only on a request that loaded current_user. A name
  logs the connection in, once per connection; None is nobody (a logout:
  stickyd.adapters.log_out); stickyd.adapters.UNKNOWN, or an exception
  (logged once), leaves the connection as it is. attrs(), if given,
  returns the person's attributes at a login.
"""

import logging
import secrets
import time

from flask import current_app, g, request
from flask.json.tag import TaggedJSONSerializer
from flask.sessions import SecureCookieSession, SessionInterface
from itsdangerous import URLSafeTimedSerializer

from . import adapters
from .session import current

SALT = "stickyd.flask.session.handover"
log = logging.getLogger("stickyd")


class StickydSession(SecureCookieSession):
    """Flask's session (modified and accessed tracking, permanent) with the
    id of its entry in the connection's values."""

    def __init__(self, initial=None, sid=None):
        super().__init__(initial)
        self.sid = sid
        self.reissue = False  # the cookie carried a hand-over: set it bare


class StickydSessionInterface(SessionInterface):
    """Flask's session in the connection's values (the module doc)."""

    serializer = TaggedJSONSerializer()
    session_class = StickydSession

    def __init__(self, fallback=None):
        # What serves outside stickyd: the app's interface before init_app.
        self.fallback = fallback

    def _sessions(self, app):
        return adapters.TreeSessions("flask/" + self.get_cookie_name(app).replace("/", "_"))

    def _signer(self, app):
        if not app.secret_key:
            adapters.warn_once(("flask-secret", app.name), "stickyd: Flask app %r has no SECRET_KEY: its session "
                               "is not handed over at a login, and stays behind if the person lives on "
                               "another worker", app.name)
            return None
        return URLSafeTimedSerializer(app.secret_key, salt=SALT)

    def open_session(self, app, request):
        s = current()
        if s is None:
            return self.fallback.open_session(app, request) if self.fallback else self.session_class()
        sessions = self._sessions(app)
        sid, token = adapters.split(request.cookies.get(self.get_cookie_name(app), ""))
        e = sessions.get(s.values, sid)
        if e is None and token:
            signer = self._signer(app)
            if signer is not None:
                e = sessions.restore(s, s.values, sid, token,
                                     lambda t: signer.loads(t, max_age=adapters.HANDOVER_AGE))
        if e is None:
            return self.session_class()
        try:
            data = self.serializer.loads(e["data"])
        except Exception:
            log.warning("stickyd: a Flask session in the connection's values does not decode: starting a new one")
            sessions.drop(s.values, sid)
            return self.session_class()
        out = self.session_class(data, sid=sid)
        out.reissue = bool(token)
        return out

    def save_session(self, app, session, response):
        s = current()
        if s is None or not isinstance(session, StickydSession):
            if self.fallback is not None:
                return self.fallback.save_session(app, session, response)
            return None
        sessions = self._sessions(app)
        name = self.get_cookie_name(app)
        domain = self.get_cookie_domain(app)
        path = self.get_cookie_path(app)
        secure = self.get_cookie_secure(app)
        samesite = self.get_cookie_samesite(app)
        httponly = self.get_cookie_httponly(app)
        if session.accessed:
            response.vary.add("Cookie")
        if not session:
            if session.sid:
                sessions.drop(s.values, session.sid)
            if session.modified:
                response.delete_cookie(name, domain=domain, path=path, secure=secure, samesite=samesite,
                                       httponly=httponly)
                response.vary.add("Cookie")
            return None
        new = session.sid is None
        handover = bool(s.pending_login)
        if not (new or session.reissue or handover or self.should_set_cookie(app, session)):
            return None
        if new:
            # One session per cookie name in a connection (one browser):
            # the one its cookie named before is gone with that cookie.
            for old in sessions.ids(s.values):
                sessions.drop(s.values, old)
            session.sid = secrets.token_urlsafe(24)
        expires = self.get_expiration_time(app, session)
        # A session that ends with the browser is bounded on the server as
        # Flask bounds its cookie's signature: PERMANENT_SESSION_LIFETIME.
        expiry = expires.timestamp() if expires is not None else time.time() + app.permanent_session_lifetime.total_seconds()
        data = self.serializer.dumps(dict(session))
        sessions.put(s.values, session.sid, data, expiry)
        value = session.sid
        if handover:
            signer = self._signer(app)
            if signer is not None:
                value = sessions.handover(s, session.sid, data, expiry, signer.dumps)
        response.set_cookie(name, value, expires=expires, httponly=httponly, domain=domain, path=path,
                            secure=secure, samesite=samesite)
        response.vary.add("Cookie")
        return None


def _flask_login_user():
    """The name of Flask-Login's current_user if this request loaded it,
    None for an anonymous one, UNKNOWN when there is no Flask-Login."""
    try:
        import flask_login
    except ImportError:
        return adapters.UNKNOWN
    if not hasattr(current_app, "login_manager") or "_login_user" not in g:
        return adapters.UNKNOWN  # not set up, or this request never asked who it is
    u = flask_login.current_user
    if u is None or not u.is_authenticated:
        return None
    return getattr(u, "username", None) or u.get_id()


def init_app(app, user=None, user_loader=None, attrs=None):
    """Installs the session interface and the naming of the person (the
    module doc) on app, and returns app."""
    if not isinstance(app.session_interface, StickydSessionInterface):
        app.session_interface = StickydSessionInterface(fallback=app.session_interface)
    if user is not None:
        name_of = user
    elif user_loader is not None:
        def name_of():
            return user_loader(request)
    else:
        name_of = _flask_login_user

    @app.after_request
    def stickyd_identify(response):
        s = current()
        if s is None:
            return response
        try:
            name = name_of()
            adapters.identify(s, name, attrs() if attrs is not None and name and name is not adapters.UNKNOWN else None)
        except Exception as e:
            adapters.warn_once(("flask-user", app.name), "stickyd: naming the person of Flask app %r: %r "
                               "(the connection stays whoever it was)", app.name, e)
        return response

    return app
