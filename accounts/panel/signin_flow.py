"""Where a sign-in stands, kept in the session: the password checked and a second factor
awaited (`pending`), and, once signed in, how the second factor was proved (`verified`)."""

import time
from dataclasses import dataclass

from django.contrib.auth import login
from django.http import HttpRequest

from accounts.models import User
from accounts.second_factor import Method

PENDING_KEY = "signin_pending"
VERIFIED_KEY = "second_factor"
RECOVERY_CODES_KEY = "recovery_codes_to_show"
# The second step must follow the password within this many seconds.
PENDING_SECONDS = 300


@dataclass(frozen=True)
class Pending:
    user: User
    backend: str
    next_url: str


def pending_start(request: HttpRequest, user: User, next_url: str) -> None:
    request.session[PENDING_KEY] = {
        "user_id": user.pk,
        "backend": getattr(user, "backend", "django.contrib.auth.backends.ModelBackend"),
        "next": next_url,
        "at": time.time(),
    }


def pending_of(request: HttpRequest) -> Pending | None:
    """The sign-in awaiting its second factor, if it is recent and its person still active."""
    state = request.session.get(PENDING_KEY)
    if not isinstance(state, dict) or time.time() - state.get("at", 0) > PENDING_SECONDS:
        return None
    user_id = state.get("user_id")
    if not isinstance(user_id, int):
        return None
    user = User.objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        return None
    return Pending(user=user, backend=str(state["backend"]), next_url=str(state["next"]))


def sign_in_complete(request: HttpRequest, user: User, backend: str, method: Method) -> None:
    """Sign in for good; `login` starts a new session key and the throttle's success."""
    request.session.pop(PENDING_KEY, None)
    login(request, user, backend=backend)
    request.session[VERIFIED_KEY] = method.value


def mark_verified(request: HttpRequest, method: Method) -> None:
    """A factor was just added in this session: the person proved it here."""
    request.session[VERIFIED_KEY] = method.value


def is_verified(request: HttpRequest) -> bool:
    return bool(request.session.get(VERIFIED_KEY))


def recovery_codes_stash(request: HttpRequest, codes: list[str]) -> None:
    """New recovery codes, to be shown once on the next page."""
    if codes:
        request.session[RECOVERY_CODES_KEY] = codes


def recovery_codes_take(request: HttpRequest) -> list[str]:
    codes = request.session.pop(RECOVERY_CODES_KEY, [])
    return [str(code) for code in codes] if isinstance(codes, list) else []
