"""Account -> Sessions: the person's panel sessions; end one, or every other one."""

from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from accounts.models import PanelSession
from accounts.panel.access import Open, open_to
from accounts.panel_sessions import EndReason, panel_session_list, person_sessions_end
from audit.services import PanelContext


@dataclass(frozen=True)
class SessionRow:
    session: PanelSession
    browser: str
    current: bool


def browser_of(user_agent: str) -> str:
    """A short name for the browser, from its User-Agent (the order matters: Edge and Chrome
    both say "Chrome", Chrome says "Safari")."""
    for token, name in (
        ("Edg/", "Edge"),
        ("OPR/", "Opera"),
        ("Firefox/", "Firefox"),
        ("Chrome/", "Chrome"),
        ("Chromium/", "Chromium"),
        ("Safari/", "Safari"),
    ):
        if token in user_agent:
            return name
    return user_agent[:40] or "Unknown browser"


@require_http_methods(["GET"])
@open_to(Open.SIGNED_IN)
@login_required
def session_list(request: HttpRequest) -> HttpResponse:
    current = request.session.session_key
    rows = [
        SessionRow(row, browser_of(row.user_agent), row.session_key == current)
        for row in panel_session_list(int(request.user.pk or 0))
    ]
    return render(request, "accounts/sessions.html", {"rows": rows})


@require_POST
@open_to(Open.SIGNED_IN)
@login_required
def session_end(request: HttpRequest, session_id: int) -> HttpResponse:
    ended = person_sessions_end(
        user=request.user,  # type: ignore[arg-type]
        reason=EndReason.SIGNED_OUT_BY_PERSON,
        context=PanelContext.from_request(request),
        keep_session_key=request.session.session_key,
        only_session_id=session_id,
    )
    if ended:
        messages.success(request, "That session is signed out.")
    else:
        messages.error(request, "No such session (to end this one, sign out).")
    return redirect("sessions")


@require_POST
@open_to(Open.SIGNED_IN)
@login_required
def sessions_end_others(request: HttpRequest) -> HttpResponse:
    ended = person_sessions_end(
        user=request.user,  # type: ignore[arg-type]
        reason=EndReason.OTHERS_ENDED_BY_PERSON,
        context=PanelContext.from_request(request),
        keep_session_key=request.session.session_key,
    )
    messages.success(request, f"{ended} other session{'s' if ended != 1 else ''} signed out.")
    return redirect("sessions")
