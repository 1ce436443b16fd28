"""Pages that read and write the session, as any Django view does; whoami
also says where stickyd served it (for the test's eyes only)."""
import os
import sys
import time

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.http import require_POST


def whoami(request):
    import stickyd  # only to report the worker and the person
    s = stickyd.session()
    return JsonResponse({
        "user": request.user.get_username() if request.user.is_authenticated else "",
        "person": s.user if s else "",
        "conn": s.conn if s else "",
        "worker": s.worker_id if s else "",
        "pid": os.getpid(),
        "python": sys.prefix,
        "notes": request.session.get("notes", []),
    })


@login_required
@require_POST
def note(request):
    request.session["notes"] = request.session.get("notes", []) + [request.POST["text"]]
    return JsonResponse({"notes": request.session["notes"]})


def stream(request):
    """n lines 300 ms apart, each saying when it was written (ns)."""
    n = int(request.GET.get("n", "4"))

    def lines():
        for i in range(n):
            if i:
                time.sleep(0.3)
            yield "%d %d\n" % (i, time.time_ns())
    return StreamingHttpResponse(lines(), content_type="text/plain")


def events(request):
    """Three server-sent events."""
    def ticks():
        for i in range(3):
            yield 'id: %d\nevent: tick\ndata: {"n":%d}\n\n' % (i, i)
            time.sleep(0.1)
    r = StreamingHttpResponse(ticks(), content_type="text/event-stream")
    r["Cache-Control"] = "no-cache"
    return r


# The cookies /cookies/set sets, as Django writes them (SimpleCookie quotes
# a value with a comma, a space, a quote or a byte past ASCII).
ODD_COOKIES = {"cart": "apple,pear", "spaced": "a b", "quote": 'x"y', "name": "Zo\u00eb"}


def set_cookies(request):
    r = HttpResponse("set", content_type="text/plain")
    for name, value in ODD_COOKIES.items():
        r.set_cookie(name, value)
    return r


def cookies(request):
    """The cookies as Django parsed them, and whether each odd one came back
    as it was set."""
    return JsonResponse({"cookies": {k: v for k, v in request.COOKIES.items() if k in ODD_COOKIES},
                         "same": all(request.COOKIES.get(k) == v for k, v in ODD_COOKIES.items())})
