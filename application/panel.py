"""The owner's one-time links, opened in a browser: sign in (from the billing system's client
area) and set a first password (from the welcome email). A used, expired or unknown link
lands on the sign-in page."""

from dataclasses import replace

from django import forms
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.forms import SetPasswordForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from accounts.panel.access import Open, open_to
from accounts.panel.signin_flow import pending_start
from accounts.passwords import password_set
from accounts.second_factor import has_second_factor
from application.links import owner_link_use, owner_link_valid
from application.models import LinkPurpose
from audit.services import PanelAction, PanelContext, audit_panel_action

BACKEND = "django.contrib.auth.backends.ModelBackend"
AFTER_SIGN_IN = "/panel/servers/"


def _to_sign_in(request: HttpRequest) -> HttpResponse:
    messages.warning(request, "That link was used already or has expired. Sign in here.")
    return redirect("login")


@open_to(Open.PUBLIC)
@never_cache
@require_http_methods(["GET"])
def sign_in_by_link(request: HttpRequest, token: str) -> HttpResponse:
    """Signs the owner in once. Someone with a second factor still gives it: the link stands
    for the password only."""
    link = owner_link_use(token=token, purpose=LinkPurpose.SIGN_IN)
    if link is None or not link.user.is_active:
        return _to_sign_in(request)
    user = link.user
    # The path holds the token: the audit names the route, not the link.
    context = replace(
        PanelContext.from_request(request), user_email=user.email, path="/accounts/login/link/"
    )
    audit_panel_action(
        organization_id=link.organization_id,
        context=context,
        action=PanelAction.SESSION_LINK_SIGN_IN,
        status_code=302,
    )
    if has_second_factor(user):
        user.backend = BACKEND
        pending_start(request, user, AFTER_SIGN_IN)
        return redirect("login_second_factor")
    login(request, user, backend=BACKEND)
    return redirect(AFTER_SIGN_IN)


@open_to(Open.PUBLIC)
@never_cache
@require_http_methods(["GET", "POST"])
def set_password_by_link(request: HttpRequest, token: str) -> HttpResponse:
    link = owner_link_valid(token=token, purpose=LinkPurpose.SET_PASSWORD)
    if link is None:
        return _to_sign_in(request)
    form: forms.Form = SetPasswordForm(link.user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        if owner_link_use(token=token, purpose=LinkPurpose.SET_PASSWORD) is None:
            return _to_sign_in(request)
        password = form.cleaned_data["new_password1"]
        password_set(user=link.user, password=password, context=PanelContext.from_request(request))
        messages.success(request, "Your password is set. Sign in with it.")
        return redirect("login")
    return render(request, "application/set_password.html", {"form": form})


urlpatterns = [
    path("link/<str:token>/", sign_in_by_link, name="application_sign_in_link"),
    path("set-password/<str:token>/", set_password_by_link, name="application_set_password"),
]
