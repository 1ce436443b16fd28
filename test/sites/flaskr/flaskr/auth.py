import functools

from flask import Blueprint, g, redirect, request, session, url_for
from werkzeug.security import check_password_hash, generate_password_hash

from .db import get_db

bp = Blueprint("auth", __name__, url_prefix="/auth")


@bp.route("/register", methods=("POST",))
def register():
    db = get_db()
    try:
        db.execute("INSERT INTO user (username, password) VALUES (?, ?)",
                   (request.form["username"], generate_password_hash(request.form["password"])))
        db.commit()
    except db.IntegrityError:
        return "User %s is already registered." % request.form["username"], 409
    return redirect(url_for("auth.login"))


@bp.route("/login", methods=("GET", "POST"))
def login():
    if request.method == "GET":
        return "<form method=post><input name=username><input name=password type=password></form>"
    user = get_db().execute("SELECT * FROM user WHERE username = ?", (request.form["username"],)).fetchone()
    if user is None or not check_password_hash(user["password"], request.form["password"]):
        return "Incorrect username or password.", 403
    session.clear()
    session["user_id"] = user["id"]
    session["notes"] = ["logged in"]
    return redirect("/whoami")


@bp.before_app_request
def load_logged_in_user():
    user_id = session.get("user_id")
    g.user = None if user_id is None else get_db().execute("SELECT * FROM user WHERE id = ?", (user_id,)).fetchone()


@bp.route("/logout")
def logout():
    session.clear()
    return redirect("/whoami")


def login_required(view):
    @functools.wraps(view)
    def wrapped_view(**kwargs):
        if g.user is None:
            return redirect(url_for("auth.login"))
        return view(**kwargs)

    return wrapped_view
