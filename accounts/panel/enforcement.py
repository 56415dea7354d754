"""Second factors required: by an organization of its members (any panel page), and by
ADMIN_REQUIRE_2FA of staff in /admin/. Also keeps each panel session's "last seen"."""

from collections.abc import Callable
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from accounts.models import User
from accounts.organization_rules import second_factor_required_of
from accounts.panel.signin_flow import is_verified
from accounts.panel_sessions import panel_session_seen
from accounts.second_factor import has_second_factor

PANEL_PREFIXES = ("/panel/", "/accounts/")
# Where a person without a required factor may still go: to add one, or to leave.
FREE_PREFIXES = ("/accounts/security/", "/accounts/login/", "/accounts/logout/")
ADMIN_PREFIX = "/admin/"
ADMIN_FREE = ("/admin/login/", "/admin/logout/")


def _to_security(request: HttpRequest, why: str) -> HttpResponse:
    messages.warning(request, why)
    return redirect(reverse("security"))


class SecondFactorRequiredMiddleware:
    """Sends a signed-in person who must have a second factor, and has none, to add one."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if isinstance(user, User) and user.is_authenticated:
            refused = self._refusal(request, user)
            if refused is not None:
                return refused
            panel_session_seen(request)
        return self.get_response(request)

    def _refusal(self, request: HttpRequest, user: User) -> HttpResponse | None:
        path = request.path_info
        if path.startswith(ADMIN_PREFIX) and not path.startswith(ADMIN_FREE):
            return self._admin_refusal(request, user)
        if not path.startswith(PANEL_PREFIXES) or path.startswith(FREE_PREFIXES):
            return None
        if second_factor_required_of(user) and not has_second_factor(user):
            return _to_security(
                request, "Your organization requires a second factor: add one to go on."
            )
        return None

    def _admin_refusal(self, request: HttpRequest, user: User) -> HttpResponse | None:
        if not settings.ADMIN_REQUIRE_2FA or not user.is_staff or is_verified(request):
            return None
        if not has_second_factor(user):
            return _to_security(request, "Staff need a second factor for the admin: add one.")
        # A session signed in before the person had a factor: sign in again, with it.
        logout(request)
        query = urlencode({"next": request.get_full_path()})
        return redirect(f"{reverse('login')}?{query}")
