"""Pages that read and write the session, as any Django view does; whoami
also says where stickyd served it (for the test's eyes only)."""
import os
import sys

from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
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
