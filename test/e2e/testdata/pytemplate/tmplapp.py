"""A WSGI app with a build step, for the template-by-fork tests: build()
loads 100,000 rows once (in the template) and counts its runs in
$STICKYD_SITE_DATA/builds; each worker, a fork of the template, serves
them without building."""
import json
import os

import stickyd

ROWS = []


def build():
    ROWS.extend({"id": i, "city": "city-%d" % (i % 977), "amount": i * 7 % 1000} for i in range(100_000))
    data = os.environ.get("STICKYD_SITE_DATA")
    if data:
        with open(os.path.join(data, "builds"), "a") as f:
            f.write("%d\n" % os.getpid())


def application(environ, start_response):
    s = stickyd.session()
    if environ["PATH_INFO"] == "/login":
        s.login(environ["QUERY_STRING"].partition("=")[2])
    if environ["PATH_INFO"] == "/note":
        s.values.set("notes", (s.values.get("notes") or []) + [environ["QUERY_STRING"]])
    body = json.dumps({"rows": len(ROWS), "pid": os.getpid(), "ppid": os.getppid(), "worker": s.worker_id,
                       "user": s.user, "notes": s.values.get("notes") or []}).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]
