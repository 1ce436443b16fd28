"""The Flask tutorial's app (flaskr), trimmed to its sessions: register, log
in and out (auth.py), and a page that reads the session. The line marked
brings it aboard stickyd."""
import hashlib
import os
import sys
import time

from flask import Flask, Response, g, jsonify, request, session, stream_with_context

import stickyd.flask


def create_app():
    app = Flask(__name__)
    app.config.from_mapping(
        SECRET_KEY="dev",
        DATABASE=os.path.join(os.environ.get("STICKYD_SITE_DATA", app.instance_path), "flaskr.sqlite"),
    )

    from . import auth, db
    db.init_app(app)
    app.register_blueprint(auth.bp)

    @app.route("/whoami")
    def whoami():
        import stickyd  # only to report the worker and the person
        s = stickyd.session()
        return jsonify(user=g.user["username"] if g.user else "", person=s.user if s else "",
                       conn=s.conn if s else "", worker=s.worker_id if s else "", pid=os.getpid(), python=sys.prefix,
                       notes=session.get("notes", []))

    @app.route("/note", methods=["POST"])
    @auth.login_required
    def note():
        session["notes"] = session.get("notes", []) + [request.form["text"]]
        return jsonify(notes=session["notes"])

    @app.route("/stream")
    def stream():
        """n lines 300 ms apart, each saying when it was written (ns)."""
        n = request.args.get("n", 4, type=int)

        def lines():
            for i in range(n):
                if i:
                    time.sleep(0.3)
                yield "%d %d\n" % (i, time.time_ns())
        return Response(stream_with_context(lines()), mimetype="text/plain")

    @app.route("/events")
    def events():
        """Three server-sent events."""
        def ticks():
            for i in range(3):
                yield 'id: %d\nevent: tick\ndata: {"n":%d}\n\n' % (i, i)
                time.sleep(0.1)
        return Response(ticks(), mimetype="text/event-stream", headers={"Cache-Control": "no-cache"})

    @app.route("/upload", methods=("GET", "POST"))
    @auth.login_required
    def upload():
        """A form with a file; what arrived (its size and SHA-256)."""
        if request.method == "GET":
            return ("<form method=post enctype=multipart/form-data id=up>"
                    "<input name=title id=title><input type=file name=file id=file></form>")
        f = request.files["file"]
        data = f.read()
        return jsonify(title=request.form["title"], name=f.filename, size=len(data),
                       sha256=hashlib.sha256(data).hexdigest())

    odd = {"cart": "apple,pear", "spaced": "a b", "quote": 'x"y', "name": "Zo\u00eb"}

    @app.route("/cookies/set")
    def set_cookies():
        """Cookies as Werkzeug writes them (quoted, escaped)."""
        r = Response("set", mimetype="text/plain")
        for name, value in odd.items():
            r.set_cookie(name, value)
        return r

    @app.route("/cookies")
    def cookies():
        """The cookies as Werkzeug parsed them, and whether each odd one
        came back as it was set."""
        return jsonify(cookies={k: v for k, v in request.cookies.items() if k in odd},
                       same=all(request.cookies.get(k) == v for k, v in odd.items()))

    stickyd.flask.init_app(app, user=lambda: g.user["username"] if g.user else None)  # stickyd
    return app
