"""Panel pages for a server's data and configuration: backups and maintenance, settings
(with drift and history), and config events.

Scopes as the API asks of a key: backups:read / backups:create / backups:restore,
maintenance:execute; reading settings needs servers:read and changing them (or scheduling
config events) servers:power, since they take effect when the server (re)starts.
"""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.models import Membership
from accounts.panel.access import ReadAndChange
from accounts.scopes import Scope
from gshost.errors import DomainError, InvalidInput
from gshost.panel_errors import found_or_404
from servers.backups.jobs import backup_create, backup_restore, maintenance_start
from servers.errors import NodeUnavailable, ServerSuspended
from servers.game.capabilities import Capability
from servers.game.config_events import (
    config_event_cancel,
    config_event_create,
    config_event_revert_now,
)
from servers.game.settings import desired_settings, settings_update
from servers.models import JobKind, Server
from servers.panel.access import (
    back_to,
    person,
    refused,
    server_page,
)
from servers.panel.forms import BackupForm, ConfigEventForm, MaintenanceForm, SettingsForm
from servers.panel.views import server_context
from servers.readings import settings_drift
from servers.selectors import (
    backup_get_for_server,
    backup_list_for_server,
    config_event_get_for_server,
)

GET_OR_POST = ["GET", "POST"]
# Settings and config events take effect when the server (re)starts: changing them is power.
READ_AND_CONFIGURE = ReadAndChange(read=Scope.SERVERS_READ, change=Scope.SERVERS_POWER)
BACKUPS = "servers_panel:backups"
SETTINGS = "servers_panel:settings"
CONFIG_EVENTS = "servers_panel:config_events"


@require_GET
@server_page(Scope.BACKUPS_READ, Capability.BACKUPS)
def backups_page(request: HttpRequest, membership: Membership, server: Server) -> HttpResponse:
    context = server_context(server, membership, "backups")
    context.update(
        backups=backup_list_for_server(server).order_by("-created_at", "-id")[:50],
        jobs=server.jobs.order_by("-created_at", "-id")[:20],
        backup_form=BackupForm(),
        maintenance_form=MaintenanceForm(),
    )
    return render(request, "servers/backups.html", context)


@require_POST
@server_page(Scope.BACKUPS_CREATE, Capability.BACKUPS)
def backup_create_page(
    request: HttpRequest, membership: Membership, server: Server
) -> HttpResponse:
    form = BackupForm(request.POST)
    name = form.cleaned_data["name"] if form.is_valid() else ""
    try:
        backup, job = backup_create(server=server, actor=person(request), name=name)
    except DomainError as refusal:  # the node refused it, or cannot be reached
        refused(request, refusal)
    else:
        messages.success(request, f"Backup {backup.id} is being made (job {job.id}).")
    return back_to(BACKUPS, server)


@require_POST
@server_page(Scope.BACKUPS_RESTORE, Capability.RESTORE)
def backup_restore_page(
    request: HttpRequest, membership: Membership, server: Server, backup_id: str
) -> HttpResponse:
    backup = found_or_404(backup_get_for_server, server, backup_id)
    try:
        job = backup_restore(server=server, backup=backup, actor=person(request))
    except DomainError as refusal:
        refused(request, refusal)
    else:
        messages.success(request, f"Restoring {backup.name} (job {job.id}).")
    return back_to(BACKUPS, server)


@require_POST
@server_page(Scope.MAINTENANCE_EXECUTE, Capability.MAINTENANCE)
def maintenance_page(request: HttpRequest, membership: Membership, server: Server) -> HttpResponse:
    form = MaintenanceForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose wipe or reinstall.")
        return back_to(BACKUPS, server)
    kind = JobKind(form.cleaned_data["action"])
    try:
        job = maintenance_start(server=server, kind=kind, actor=person(request))
    except DomainError as refusal:
        refused(request, refusal)
    else:
        messages.success(request, f"{kind.label} started (job {job.id}).")
    return back_to(BACKUPS, server)


@require_http_methods(GET_OR_POST)
@server_page(READ_AND_CONFIGURE, Capability.SETTINGS)
def settings_page(request: HttpRequest, membership: Membership, server: Server) -> HttpResponse:
    form = SettingsForm(initial=desired_settings(server), game=server.game)
    if request.method == "POST":
        form = SettingsForm(request.POST, game=server.game)
        if _save_settings(request, server, form):
            return back_to(SETTINGS, server)
    context = server_context(server, membership, "settings")
    context.update(
        form=form,
        may_change=READ_AND_CONFIGURE.change in membership.held_scopes,
        history=server.setting_changes.order_by("-changed_at", "-id")[:50],
    )
    try:
        context["drift"] = settings_drift(server)
    except NodeUnavailable as unavailable:  # the settings themselves still show and change
        context["drift_unavailable"] = unavailable
    return render(request, "servers/settings.html", context, status=400 if form.errors else 200)


def _save_settings(request: HttpRequest, server: Server, form: SettingsForm) -> bool:
    if not form.is_valid():
        return False
    try:
        changed = settings_update(server=server, values=form.values(), actor=person(request))
    except (InvalidInput, ServerSuspended) as refusal:
        form.add_error(None, refusal.message)
        return False
    messages.success(request, f"{len(changed)} setting(s) changed.")
    return True


@require_http_methods(GET_OR_POST)
@server_page(READ_AND_CONFIGURE, Capability.CONFIG_EVENTS)
def config_events_page(
    request: HttpRequest, membership: Membership, server: Server
) -> HttpResponse:
    form = ConfigEventForm(game=server.game)
    status = 200
    if request.method == "POST":
        form = ConfigEventForm(request.POST, game=server.game)
        if form.is_valid() and _create_event(request, membership, server, form):
            return back_to(CONFIG_EVENTS, server)
        status = 400
    context = server_context(server, membership, "config_events")
    events = server.config_events.order_by("-apply_at", "-id")[:50]
    context.update(
        form=form, may_change=READ_AND_CONFIGURE.change in membership.held_scopes, events=events
    )
    return render(request, "servers/config_events.html", context, status=status)


def _create_event(
    request: HttpRequest, membership: Membership, server: Server, form: ConfigEventForm
) -> bool:
    data = form.cleaned_data
    try:
        event = config_event_create(
            server=server,
            name=data["name"],
            changes=form.changes(),
            apply_at=data["apply_at"],
            revert_at=data["revert_at"],
            created_by=membership.user,
            actor=person(request),
        )
    except InvalidInput as refusal:
        form.add_error(None, refusal.message)
        return False
    messages.success(request, f"Config event “{event.name}” is scheduled.")
    return True


@require_POST
@server_page(Scope.SERVERS_POWER, Capability.CONFIG_EVENTS)
def config_event_end_page(
    request: HttpRequest, membership: Membership, server: Server, event_id: str
) -> HttpResponse:
    """Cancel a scheduled event, or revert an applied one now."""
    event = found_or_404(config_event_get_for_server, server, event_id)
    actor = person(request)
    if config_event_cancel(event=event, actor=actor):
        messages.success(request, f"“{event.name}” is cancelled.")
    elif config_event_revert_now(event=event, actor=actor):
        messages.success(request, f"“{event.name}” is reverted.")
    else:
        messages.error(request, f"“{event.name}” is already {event.state}.")
    return back_to(CONFIG_EVENTS, server)
