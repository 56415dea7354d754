"""Panel pages for servers: the list, a server's overview, power and console.

Thin: parse, one service, render. A refusal from a service (409 invalid_state, ...) comes
back as a message on the page the person was on.
"""

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from accounts.models import Membership
from accounts.panel.access import member_with_scope
from accounts.scopes import Scope
from gshost.api.errors import domain_status
from gshost.errors import DomainError
from gshost.ids import format_timestamp
from servers.agents.console_tokens import console_session_issue, socket_url
from servers.errors import NodeUnavailable
from servers.game.capabilities import Capability, is_enabled, is_supported
from servers.lifecycle import REQUESTS, allowed_triggers
from servers.models import Server
from servers.panel.access import back_to, person, refused, server_page
from servers.panel.forms import ConsoleForm, PowerForm
from servers.panel.sftp import sftp_details
from servers.readings import console_lines_read, players_read, stats_read
from servers.runtime import host_traits
from servers.selectors import server_list_for_organization
from servers.services import (
    MAX_COMMAND_LENGTH,
    PowerAction,
    server_power,
    server_send_command,
    server_set_restart_on_crash,
)

POWER_LABELS = {"start": "Start", "stop": "Stop", "restart": "Restart"}


def usable(server: Server) -> dict[str, bool]:
    """Which capabilities the panel offers for this server (supported and enabled)."""
    return {c.value: is_supported(server, c) and is_enabled(server, c) for c in Capability}


def server_context(server: Server, membership: Membership, tab: str) -> dict[str, Any]:
    return {
        "server": server,
        "tab": tab,
        "can": usable(server),
        "held": {scope.name.lower(): scope in membership.held_scopes for scope in Scope},
        "sftp": sftp_details(server, membership),
        "host": host_traits(server.node),
    }


@require_GET
@member_with_scope(Scope.SERVERS_READ)
def server_list(request: HttpRequest, membership: Membership) -> HttpResponse:
    servers = server_list_for_organization(membership.organization_id).select_related("node")
    servers = servers.order_by("name", "id")
    return render(request, "servers/list.html", {"servers": servers})


@never_cache
@require_GET
@member_with_scope(Scope.SERVERS_READ)
def server_states(request: HttpRequest, membership: Membership) -> HttpResponse:
    """What the pages poll every few seconds: each server's state and address."""
    servers = server_list_for_organization(membership.organization_id)
    rows = servers.values_list("id", "state", "address")
    return JsonResponse({"servers": {sid: {"state": s, "address": a} for sid, s, a in rows}})


@require_GET
@server_page(Scope.SERVERS_READ)
def server_detail(request: HttpRequest, membership: Membership, server: Server) -> HttpResponse:
    context = server_context(server, membership, "overview")
    allowed = frozenset() if server.suspended else allowed_triggers(server.state) & REQUESTS
    context.update(
        power=[(a, POWER_LABELS[a], a in allowed) for a in ("start", "stop", "restart")],
        console_form=ConsoleForm(),
        console_log=server.console_commands.order_by("-sent_at", "-id")[:20],
        transitions=server.transitions.order_by("-at", "-id")[:10],
        now=timezone.now(),
    )
    context.update(_readings(server, context["can"]))
    live = (
        context["can"]["console"] and context["host"].serves_live_console and not server.suspended
    )
    context["live_console"] = live
    response = render(request, "servers/detail.html", context)
    if live:  # the page's console talks straight to the node (docs/console.md)
        origin = socket_url(server).split("/api/", 1)[0]
        response._csp_update = {"connect-src": [origin]}  # type: ignore[attr-defined]
    return response


def _readings(server: Server, can: dict[str, bool]) -> dict[str, Any]:
    """Stats and players, or why they cannot be shown now (the node is unavailable)."""
    try:
        return {
            "stats": stats_read(server) if can["metrics"] else None,
            "players": players_read(server) if can["players"] else None,
        }
    except NodeUnavailable as unavailable:
        return {"stats": None, "players": None, "node_unavailable": unavailable}


@require_POST
@server_page(Scope.SERVERS_POWER, Capability.POWER)
def server_power_page(request: HttpRequest, membership: Membership, server: Server) -> HttpResponse:
    form = PowerForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose start, stop or restart.")
        return back_to("servers_panel:detail", server)
    action = PowerAction(form.cleaned_data["action"])
    try:
        server = server_power(server=server, action=action, actor=person(request))
    except DomainError as refusal:
        refused(request, refusal)
    else:
        messages.success(
            request, f"{POWER_LABELS[action]} requested: the server is {server.state}."
        )
    return back_to("servers_panel:detail", server)


@require_POST
@server_page(Scope.CONSOLE_WRITE, Capability.CONSOLE)
def server_console_page(
    request: HttpRequest, membership: Membership, server: Server
) -> HttpResponse:
    form = ConsoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Type a command of at most {MAX_COMMAND_LENGTH} characters.")
        return back_to("servers_panel:detail", server)
    try:
        sent = server_send_command(
            server=server, command=form.cleaned_data["command"], actor=person(request)
        )
    except DomainError as refusal:
        refused(request, refusal)
    else:
        messages.success(request, f"Sent “{sent.command}”. {sent.output}")
    return back_to("servers_panel:detail", server)


@require_POST
@server_page(Scope.SERVERS_WRITE)
def server_crash_restarts_page(
    request: HttpRequest, membership: Membership, server: Server
) -> HttpResponse:
    """Turn the server's restarts after a crash on or off."""
    enabled = request.POST.get("restart_on_crash") == "on"
    server_set_restart_on_crash(server=server, enabled=enabled, actor=person(request))
    word = "restarted" if enabled else "left stopped"
    messages.success(request, f"After a crash this server is now {word}.")
    return back_to("servers_panel:detail", server)


@never_cache
@require_POST
@server_page(Scope.SERVERS_READ, Capability.CONSOLE)
def server_console_session(
    request: HttpRequest, membership: Membership, server: Server
) -> HttpResponse:
    """JSON: a console token for the signed-in person (`{"url", "token", "expires_at",
    "scopes"}`, as the API's `POST /servers/{id}/console/sessions`)."""
    try:
        session = console_session_issue(
            server=server, granted=membership.held_scopes, person_id=membership.user_id
        )
    except DomainError as refusal:
        return _json_error(domain_status(refusal), refusal.code, refusal.message)
    return JsonResponse(
        {
            "url": session.url,
            "token": session.token,
            "expires_at": format_timestamp(session.expires_at),
            "scopes": session.scopes,
        },
        status=201,
    )


MAX_LINE_NUMBER = 2**62


@never_cache
@require_GET
@server_page(Scope.SERVERS_READ)
def server_console_lines(
    request: HttpRequest, membership: Membership, server: Server
) -> HttpResponse:
    """JSON for the page's live console: `{"lines": [{"n", "text"}], "last": n, "as_of",
    "age_seconds"}` after `?after=n`; on an agent node, the lines as last fetched from it
    (`as_of`, null until the first fetch), never waiting for it. Reading the console is
    reading the server (servers:read), like the page."""
    if not usable(server)[Capability.CONSOLE]:
        return _json_error(403, "console_unavailable", "This server has no console.")
    raw = request.GET.get("after", "0")
    if not raw.isdigit() or int(raw) > MAX_LINE_NUMBER:
        return _json_error(400, "invalid_request", "after is a line number (0 or more).")
    try:
        console = console_lines_read(server, int(raw))
    except NodeUnavailable as unavailable:
        response = _json_error(503, unavailable.code, unavailable.message, **unavailable.extra)
        response["Retry-After"] = str(unavailable.extra["retry_after"])
        return response
    lines = [{"n": line.n, "text": line.text} for line in console.lines]
    as_of, age = console.as_of, None
    if as_of is not None:
        age = max(0, int((timezone.now() - as_of).total_seconds()))
    return JsonResponse(
        {
            "lines": lines,
            "last": console.last,
            "as_of": format_timestamp(as_of),
            "age_seconds": age,
        }
    )


def _json_error(status: int, code: str, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, **extra}}, status=status)
