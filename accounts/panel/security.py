"""Account -> Security: the person's second factors, recovery codes, password, and (for an
owner) the organization's second-factor rule. Thin: each action is one service call."""

import base64
import json
from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordChangeForm
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts.errors import CodeRefused, FactorNotFound, PasskeyRefused, SignInLocked
from accounts.models import Role, User
from accounts.organization_rules import organization_second_factor_set
from accounts.panel.access import Open, open_to
from accounts.panel.forms import CodeForm, SecondFactorRuleForm
from accounts.panel.organization import current_membership
from accounts.panel.signin_flow import mark_verified, recovery_codes_stash, recovery_codes_take
from accounts.panel_sessions import panel_session_rekey
from accounts.passkeys import Relying, passkey_register, registration_options
from accounts.passwords import password_changed
from accounts.second_factor import (
    Method,
    code_check,
    factors_of,
    passkey_remove,
    recovery_codes_create,
    totp_enrolment_confirm,
    totp_enrolment_start,
    totp_qr_svg,
    totp_remove,
    totp_secret,
)
from accounts.signin import lockout_response
from audit.services import PanelContext

REGISTRATION_CHALLENGE_KEY = "passkey_registration_challenge"


def _user(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # login_required let only a signed-in person through
    return user


def _is_owner(request: HttpRequest) -> bool:
    membership = current_membership(request)
    return membership is not None and membership.role == Role.OWNER


@never_cache
@require_http_methods(["GET"])
@open_to(Open.SIGNED_IN)
@login_required
def security_page(request: HttpRequest) -> HttpResponse:
    membership = current_membership(request)
    context = {
        "factors": factors_of(_user(request)),
        "code_form": CodeForm(),
        "is_owner": _is_owner(request),
        "rule_form": SecondFactorRuleForm(
            initial={
                "require_second_factor": bool(
                    membership and membership.organization.require_second_factor
                )
            }
        ),
    }
    return render(request, "accounts/security/index.html", context)


@never_cache
@require_http_methods(["GET", "POST"])
@open_to(Open.SIGNED_IN)
@login_required
def totp_add(request: HttpRequest) -> HttpResponse:
    """The QR code and secret of a new authenticator app, confirmed by its first code."""
    user = _user(request)
    if factors_of(user).totp:  # replacing it would remove it without a current code
        messages.info(request, "Remove the current authenticator app first (with its code).")
        return redirect("security")
    device = totp_enrolment_start(user)
    form = CodeForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            codes = totp_enrolment_confirm(
                user=user,
                code=form.cleaned_data["code"],
                context=PanelContext.from_request(request),
            )
        except CodeRefused as refused:
            form.add_error("code", refused.message)
        else:
            mark_verified(request, Method.TOTP)
            messages.success(request, "The authenticator app is now your second factor.")
            recovery_codes_stash(request, codes)
            return redirect("security_recovery_codes" if codes else "security")
    context = {"form": form, "qr_svg": totp_qr_svg(device), "secret": totp_secret(device)}
    status = 400 if form.is_bound else 200
    return render(request, "accounts/security/totp_add.html", context, status=status)


@never_cache
@require_http_methods(["GET"])
@open_to(Open.SIGNED_IN)
@login_required
def recovery_codes_show(request: HttpRequest) -> HttpResponse:
    """New recovery codes, shown this once."""
    codes = recovery_codes_take(request)
    if not codes:
        return redirect("security")
    return render(request, "accounts/security/recovery_codes.html", {"codes": codes})


def _with_current_code(
    request: HttpRequest, action: Callable[[str], object], done: str, then: str = "security"
) -> HttpResponse:
    """Run `action` with the code the form carries; refusals return to the security page."""
    form = CodeForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Type a current code from your authenticator app first.")
        return redirect("security")
    try:
        action(form.cleaned_data["code"])
    except SignInLocked:
        return lockout_response(request, credentials={"username": _user(request).email})
    except (CodeRefused, FactorNotFound) as refused:
        messages.error(request, refused.message)
        return redirect("security")
    messages.success(request, done)
    return redirect(then)


@require_POST
@open_to(Open.SIGNED_IN)
@login_required
def recovery_codes_renew(request: HttpRequest) -> HttpResponse:
    user, context = _user(request), PanelContext.from_request(request)

    def renew(code: str) -> None:
        code_check(request=request, user=user, code=code, context=context)
        recovery_codes_stash(request, recovery_codes_create(user=user, context=context))

    return _with_current_code(
        request,
        renew,
        "New recovery codes: the old ones no longer work.",
        then="security_recovery_codes",
    )


@require_POST
@open_to(Open.SIGNED_IN)
@login_required
def totp_delete(request: HttpRequest) -> HttpResponse:
    user, context = _user(request), PanelContext.from_request(request)
    return _with_current_code(
        request,
        lambda code: totp_remove(request=request, user=user, code=code, context=context),
        "The authenticator app is removed; your other sessions are signed out.",
    )


@require_POST
@open_to(Open.SIGNED_IN)
@login_required
def passkey_delete(request: HttpRequest, passkey_id: int) -> HttpResponse:
    user, context = _user(request), PanelContext.from_request(request)
    return _with_current_code(
        request,
        lambda code: passkey_remove(
            request=request, user=user, passkey_id=passkey_id, code=code, context=context
        ),
        "The passkey is removed; your other sessions are signed out.",
    )


@require_POST
@open_to(Open.SIGNED_IN)
@login_required
def passkey_registration_options(request: HttpRequest) -> JsonResponse:
    options, challenge = registration_options(_user(request), Relying.from_request(request))
    request.session[REGISTRATION_CHALLENGE_KEY] = base64.b64encode(challenge).decode("ascii")
    return JsonResponse({"options": json.loads(options)})


@require_POST
@open_to(Open.SIGNED_IN)
@login_required
def passkey_add(request: HttpRequest) -> JsonResponse:
    """The browser's answer to the registration options, with the passkey's name."""
    challenge = request.session.pop(REGISTRATION_CHALLENGE_KEY, None)
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        body = None
    if not (challenge and isinstance(body, dict) and isinstance(body.get("credential"), dict)):
        return JsonResponse({"error": PasskeyRefused.default_message}, status=400)
    try:
        codes = passkey_register(
            user=_user(request),
            name=str(body.get("name") or ""),
            credential=body["credential"],
            challenge=base64.b64decode(challenge),
            relying=Relying.from_request(request),
            context=PanelContext.from_request(request),
        )
    except PasskeyRefused as refused:
        return JsonResponse({"error": refused.message}, status=400)
    mark_verified(request, Method.PASSKEY)
    recovery_codes_stash(request, codes)
    messages.success(request, "The passkey is added.")
    then = reverse("security_recovery_codes" if codes else "security")
    return JsonResponse({"redirect": then})


@never_cache
@require_http_methods(["GET", "POST"])
@open_to(Open.SIGNED_IN)
@login_required
def password_change(request: HttpRequest) -> HttpResponse:
    """A new password; every other session of the person ends."""
    user = _user(request)
    form = PasswordChangeForm(user, request.POST if request.method == "POST" else None)
    if not form.is_valid():
        status = 400 if form.is_bound else 200
        return render(request, "accounts/security/password.html", {"form": form}, status=status)
    form.save()
    old_key = request.session.session_key
    update_session_auth_hash(request, user)  # a new session key, kept signed in
    panel_session_rekey(old_key, request.session.session_key)
    password_changed(
        user=user,
        context=PanelContext.from_request(request),
        keep_session_key=request.session.session_key,
    )
    messages.success(request, "Your password is changed; your other sessions are signed out.")
    return redirect("security")


@require_POST
@open_to(Open.SIGNED_IN)
@login_required
def organization_rule(request: HttpRequest) -> HttpResponse:
    """An owner requires (or stops requiring) a second factor of every member."""
    membership = current_membership(request)
    form = SecondFactorRuleForm(request.POST)
    if membership is None or membership.role != Role.OWNER or not form.is_valid():
        return render(request, "accounts/scope_refused.html", {"scope": "owner"}, status=403)
    required = form.cleaned_data["require_second_factor"]
    organization_second_factor_set(
        organization=membership.organization,
        required=required,
        context=PanelContext.from_request(request),
    )
    state = "now requires" if required else "no longer requires"
    messages.success(request, f"{membership.organization.name} {state} a second factor.")
    return redirect("security")
