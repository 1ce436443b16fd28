"""stickyd for an unchanged Django site: one line each in settings.py.

    MIDDLEWARE = [..., "django.contrib.auth.middleware.AuthenticationMiddleware",
                  ..., "stickyd.django.StickydMiddleware"]
    SESSION_ENGINE = "stickyd.django.session"

StickydMiddleware names the person from Django's own login: once a
request's user is authenticated, the connection is logged into the person
named by the username (user.get_username(), kept as is when stickyd can
carry it: stickyd.adapters.person_name), with the attributes is_staff and
is_superuser ("true"/"false") for the operator's group rules. It logs in
once per connection, when the person changes, and only on a request that
looked at request.user (it never loads the user itself). At a logout
(request.user anonymous while the connection is someone's) the person is
forgotten if this is their only connection (stickyd.adapters.log_out).

It must come after AuthenticationMiddleware; its work is done on the way
out, after the view (a login view's auth.login() is seen on its own
response) and before SessionMiddleware saves the session. Outside stickyd
it does nothing.

The session engine is stickyd.django.session (its module doc).
"""

from django.utils.functional import SimpleLazyObject, empty

from .. import adapters
from ..session import current


def _looked_at_user(request):
    """The request's user if the request evaluated it (a view, a
    decorator, auth.login or logout), else None."""
    user = request.__dict__.get("user")
    if user is None:
        return None
    if isinstance(user, SimpleLazyObject):
        if user._wrapped is empty:
            return None  # nobody asked who this is: leave the connection be
        return user._wrapped
    return user


def attributes(user):
    """The attributes recorded with the person at their login."""
    return {
        "is_staff": "true" if getattr(user, "is_staff", False) else "false",
        "is_superuser": "true" if getattr(user, "is_superuser", False) else "false",
    }


class StickydMiddleware:
    """Names the stickyd person from Django's login (the package doc)."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        s = current()
        if s is not None:
            user = _looked_at_user(request)
            if user is not None:
                if getattr(user, "is_authenticated", False):
                    adapters.identify(s, user.get_username(), attributes(user))
                    session = getattr(request, "session", None)
                    if s.pending_login and session is not None and not session.is_empty():
                        # Saved on this response, so that it is handed over.
                        session.modified = True
                else:
                    adapters.identify(s, None)
        return response
