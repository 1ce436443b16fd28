"""pynotes: a small Flask site released as a python3 bundle
(docs/bundles.md). Its login is Flask's session; stickyd.flask makes the
logged-in user the stickyd person, so the session moves with them.

    stickyd bundle pack -app plugins/examples/pynotes/app \
        -deps plugins/examples/pynotes/vendor -sdk plugins/python \
        -wsgi pynotes.wsgi:application -requires-python '>=3.9' \
        -name pynotes -version 1.0.0 -git . -o pynotes.tar.gz

Routes (JSON answers):
  POST /login  user=NAME   logs in (no password: it is an example)
  POST /logout             logs out
  POST /note   text=T      adds a note to the session (403 without a login)
  GET  /whoami             the user, the stickyd person and worker, the
                           notes, and the release serving it: the bundle's
                           digest ($STICKYD_BUNDLE), its dependency's
                           version (tally.__version__) and where Flask
                           was imported from
"""

import os

import flask
import tally
from flask import Flask, jsonify, request, session

import stickyd
import stickyd.flask

__version__ = "1"


def create_app():
    app = Flask(__name__)
    app.config["SECRET_KEY"] = os.environ.get("PYNOTES_SECRET_KEY", "dev")

    def who():
        s = stickyd.session()
        notes = session.get("notes", [])
        return {"user": session.get("user", ""), "person": s.user if s else "", "worker": s.worker_id if s else "",
                "notes": len(notes), "last": notes[-1] if notes else "", "summary": tally.summary(notes),
                "bundle": os.environ.get("STICKYD_BUNDLE", ""), "tally": tally.__version__, "pid": os.getpid(),
                "flask": os.path.dirname(flask.__file__)}

    @app.post("/login")
    def login():
        user = request.form.get("user", "")
        if not user:
            return jsonify(error="give a user"), 400
        session.clear()
        session["user"] = user
        session["notes"] = []
        return jsonify(who())

    @app.post("/logout")
    def logout():
        session.clear()
        return jsonify(who())

    @app.post("/note")
    def note():
        if not session.get("user"):
            return jsonify(error="log in first"), 403
        session["notes"] = session.get("notes", []) + [request.form.get("text", "")]
        return jsonify(who())

    @app.get("/whoami")
    def whoami():
        return jsonify(who())

    stickyd.flask.init_app(app, user=lambda: session.get("user") or None)  # stickyd
    return app
