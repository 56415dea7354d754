"""Panel pages for command schedules: list, create, edit, enable/disable, run now, delete.

Looking needs schedules:read; changing or running needs schedules:execute. A schedule's command
is a console command, so creating or editing one needs console:write as well.
"""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.models import Membership
from accounts.panel.access import AllOf
from accounts.scopes import Scope
from gshost.errors import InvalidInput
from gshost.panel_errors import found_or_404
from servers.game.capabilities import Capability
from servers.models import RunStatus, Schedule, ScheduleRun, Server
from servers.panel.access import back_to, person, server_page
from servers.panel.forms import ScheduleForm
from servers.panel.views import server_context
from servers.schedules import (
    schedule_create,
    schedule_delete,
    schedule_run_now,
    schedule_set_enabled,
    schedule_update,
)
from servers.selectors import schedule_get_for_server, schedule_list_for_server

GET_OR_POST = ["GET", "POST"]
LIST = "servers_panel:schedules"
WRITE_COMMAND = AllOf((Scope.SCHEDULES_EXECUTE, Scope.CONSOLE_WRITE))


@require_GET
@server_page(Scope.SCHEDULES_READ, Capability.SCHEDULES)
def schedule_list(request: HttpRequest, membership: Membership, server: Server) -> HttpResponse:
    context = server_context(server, membership, "schedules")
    context["schedules"] = schedule_list_for_server(server).order_by("name", "id")
    runs = ScheduleRun.objects.filter(schedule__server=server).select_related("schedule")
    context["runs"] = runs.order_by("-ran_at", "-id")[:25]
    return render(request, "servers/schedules.html", context)


def _render_form(
    request: HttpRequest,
    membership: Membership,
    server: Server,
    form: ScheduleForm,
    schedule: Schedule | None = None,
    status: int = 200,
) -> HttpResponse:
    context = server_context(server, membership, "schedules")
    context.update(form=form, schedule=schedule)
    return render(request, "servers/schedule_form.html", context, status=status)


@require_http_methods(GET_OR_POST)
@server_page(WRITE_COMMAND, Capability.SCHEDULES)
def schedule_create_page(
    request: HttpRequest, membership: Membership, server: Server
) -> HttpResponse:
    if request.method != "POST":
        return _render_form(request, membership, server, ScheduleForm())
    return _save(request, membership, server, None)


@require_http_methods(GET_OR_POST)
@server_page(WRITE_COMMAND, Capability.SCHEDULES)
def schedule_edit_page(
    request: HttpRequest, membership: Membership, server: Server, schedule_id: str
) -> HttpResponse:
    schedule = found_or_404(schedule_get_for_server, server, schedule_id)
    if request.method != "POST":
        initial = {
            field: getattr(schedule, field)
            for field in ("name", "cron", "command", "enabled", "alert_on", "alert_after_missed")
        }
        return _render_form(request, membership, server, ScheduleForm(initial=initial), schedule)
    return _save(request, membership, server, schedule)


def _save(
    request: HttpRequest, membership: Membership, server: Server, schedule: Schedule | None
) -> HttpResponse:
    """Create (no schedule yet) or update from the posted form; the form again, 400, if refused."""
    form = ScheduleForm(request.POST)
    if form.is_valid():
        data, actor = form.schedule_input(), person(request)
        try:
            if schedule is None:
                saved = schedule_create(
                    server=server, data=data, created_by=membership.user, actor=actor
                )
            else:
                saved = schedule_update(schedule=schedule, data=data, actor=actor)
        except InvalidInput as refusal:
            form.add_error(None, refusal.message)
        else:
            messages.success(request, f"Schedule “{saved.name}” is saved.")
            return back_to(LIST, server)
    return _render_form(request, membership, server, form, schedule, status=400)


@require_POST
@server_page(Scope.SCHEDULES_EXECUTE, Capability.SCHEDULES)
def schedule_toggle_page(
    request: HttpRequest, membership: Membership, server: Server, schedule_id: str
) -> HttpResponse:
    schedule = found_or_404(schedule_get_for_server, server, schedule_id)
    enabled = not schedule.enabled
    schedule_set_enabled(schedule=schedule, enabled=enabled, actor=person(request))
    state = "enabled" if enabled else "disabled"
    messages.success(request, f"Schedule “{schedule.name}” is {state}.")
    return back_to(LIST, server)


@require_POST
@server_page(Scope.SCHEDULES_EXECUTE, Capability.SCHEDULES)
def schedule_run_page(
    request: HttpRequest, membership: Membership, server: Server, schedule_id: str
) -> HttpResponse:
    schedule = found_or_404(schedule_get_for_server, server, schedule_id)
    run = schedule_run_now(schedule=schedule, actor=person(request))
    level = messages.success if run.status == RunStatus.SUCCEEDED else messages.warning
    level(request, f"Run {run.id} of “{schedule.name}”: {run.status}. {run.output}")
    return back_to(LIST, server)


@require_POST
@server_page(Scope.SCHEDULES_EXECUTE, Capability.SCHEDULES)
def schedule_delete_page(
    request: HttpRequest, membership: Membership, server: Server, schedule_id: str
) -> HttpResponse:
    schedule = found_or_404(schedule_get_for_server, server, schedule_id)
    schedule_delete(schedule=schedule, actor=person(request))
    messages.success(request, f"Schedule “{schedule.name}” is deleted.")
    return back_to(LIST, server)
