"""Signing in: the password, then a second factor (a code or a passkey) when the person has
one; or a passkey alone. Thin: the checks are accounts.second_factor's and accounts.passkeys'."""

import base64
import json
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts.errors import CodeRefused, PasskeyRefused, SignInLocked
from accounts.panel.access import Open, open_to
from accounts.panel.forms import CodeForm, EmailAuthenticationForm
from accounts.panel.signin_flow import Pending, pending_of, pending_start, sign_in_complete
from accounts.passkeys import Relying, authentication_options, passkey_authenticate
from accounts.second_factor import Method, code_check, has_second_factor, sign_in_locked
from accounts.signin import lockout_json, lockout_response
from audit.services import PanelContext

CHALLENGE_KEY = "passkey_sign_in_challenge"
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


@method_decorator(open_to(Open.PUBLIC), name="dispatch")
class SignInView(auth_views.LoginView):
    """Django's sign-in, stopping before `login` when the person has a second factor."""

    template_name = "accounts/login.html"
    authentication_form = EmailAuthenticationForm
    redirect_authenticated_user = True

    def form_valid(self, form: EmailAuthenticationForm) -> HttpResponse:  # type: ignore[override]
        user = form.get_user()
        if not has_second_factor(user):
            return super().form_valid(form)
        pending_start(self.request, user, self.get_success_url())
        return redirect("login_second_factor")


def _context(request: HttpRequest, pending: Pending) -> PanelContext:
    return replace(PanelContext.from_request(request), user_email=pending.user.email)


def _render_step(request: HttpRequest, form: CodeForm, status: int = 200) -> HttpResponse:
    return render(request, "accounts/second_factor.html", {"form": form}, status=status)


@never_cache
@require_http_methods(["GET", "POST"])
@open_to(Open.PUBLIC)
def second_factor_step(request: HttpRequest) -> HttpResponse:
    """The code (authenticator app or recovery code) after a right password."""
    pending = pending_of(request)
    if pending is None:
        return redirect("login")
    if request.method != "POST":
        return _render_step(request, CodeForm())
    form = CodeForm(request.POST)
    if not form.is_valid():
        return _render_step(request, form, 400)
    try:
        method = code_check(
            request=request,
            user=pending.user,
            code=form.cleaned_data["code"],
            context=_context(request, pending),
        )
    except SignInLocked:
        return lockout_response(request, credentials={"username": pending.user.email})
    except CodeRefused as refused:
        form.add_error("code", refused.message)
        return _render_step(request, form, 400)
    sign_in_complete(request, pending.user, pending.backend, method)
    return redirect(pending.next_url)


@require_POST
@open_to(Open.PUBLIC)
def passkey_sign_in_options(request: HttpRequest) -> JsonResponse:
    """Options for the browser: the pending person's passkeys, or any (passkey alone)."""
    pending = pending_of(request)
    options, challenge = authentication_options(
        Relying.from_request(request), pending.user if pending else None
    )
    request.session[CHALLENGE_KEY] = base64.b64encode(challenge).decode("ascii")
    return JsonResponse({"options": json.loads(options)})


def _body_of(request: HttpRequest) -> dict[str, Any]:
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _credential_of(body: dict[str, Any]) -> dict[str, Any]:
    credential = body.get("credential")
    return credential if isinstance(credential, dict) else {}


def _next_of(request: HttpRequest, body: dict[str, Any], pending: Pending | None) -> str:
    if pending is not None:
        return pending.next_url
    wanted = str(body.get("next") or "")
    safe = url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return wanted if wanted and safe else str(settings.LOGIN_REDIRECT_URL)


@require_POST
@open_to(Open.PUBLIC)
def passkey_sign_in(request: HttpRequest) -> JsonResponse:
    """The browser's answer: signs in the passkey's person (the pending one, if any)."""
    challenge = request.session.pop(CHALLENGE_KEY, None)
    pending = pending_of(request)
    body = _body_of(request)
    if pending is not None and sign_in_locked(request, pending.user):
        return lockout_json(request, credentials={"username": pending.user.email})
    if challenge is None:
        return JsonResponse({"error": PasskeyRefused.default_message}, status=400)
    try:
        passkey = passkey_authenticate(
            credential=_credential_of(body),
            challenge=base64.b64decode(challenge),
            relying=Relying.from_request(request),
            user=pending.user if pending else None,
        )
    except PasskeyRefused as refused:
        return JsonResponse({"error": refused.message}, status=400)
    if sign_in_locked(request, passkey.user):  # a lock holds for passkeys too
        return lockout_json(request, credentials={"username": passkey.user.email})
    backend = pending.backend if pending else MODEL_BACKEND
    sign_in_complete(request, passkey.user, backend, Method.PASSKEY)
    return JsonResponse({"redirect": _next_of(request, body, pending)})
