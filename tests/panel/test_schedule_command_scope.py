"""A schedule's command is a console command: writing one in the panel needs `console:write`
as well as `schedules:execute`."""

from typing import Any

import pytest
from django.test import Client

from accounts.models import Organization
from accounts.services import member_add
from audit.actors import Actor
from servers.models import Schedule, Server
from servers.schedules import ScheduleInput, schedule_create

SCHEDULER = ["servers:read", "schedules:read", "schedules:execute"]
FORM = {"name": "Op me", "cron": "0 3 * * *", "command": "op mallory", "alert_after_missed": "3"}


def _client(acme: Organization, scopes: list[str]) -> Client:
    person = member_add(
        organization=acme, email="sam@acme.test", password=None, member_scopes=scopes
    )
    client = Client()
    client.force_login(person.user)
    return client


@pytest.fixture
def schedule(acme_server: Server) -> Schedule:
    data = ScheduleInput(name="Nightly", cron="0 3 * * *", command="save-all")
    return schedule_create(
        server=acme_server, data=data, created_by=None, actor=Actor.system("tests")
    )


def _pages(server: Server, schedule: Schedule) -> list[tuple[str, str, dict[str, Any]]]:
    base = f"/panel/servers/{server.id}/schedules"
    return [
        ("get", f"{base}/new", {}),
        ("post", f"{base}/new", FORM),
        ("get", f"{base}/{schedule.id}/edit", {}),
        ("post", f"{base}/{schedule.id}/edit", FORM),
    ]


def test_it_refuses_to_write_a_schedule_without_console_write(acme, acme_server, schedule):
    client = _client(acme, SCHEDULER)
    for method, url, data in _pages(acme_server, schedule):
        response = getattr(client, method)(url, data)
        assert response.status_code == 403, (method, url)
        assert "console:write" in response.content.decode()
    assert list(Schedule.objects.values_list("command", flat=True)) == ["save-all"]


def test_it_writes_a_schedule_with_console_write_too(acme, acme_server, schedule):
    client = _client(acme, [*SCHEDULER, "console:write"])
    response = client.post(f"/panel/servers/{acme_server.id}/schedules/new", FORM)
    assert response.status_code == 302
    assert Schedule.objects.filter(command="op mallory").exists()


def test_running_an_existing_schedule_needs_only_schedules_execute(acme, acme_server, schedule):
    client = _client(acme, SCHEDULER)
    response = client.post(f"/panel/servers/{acme_server.id}/schedules/{schedule.id}/run")
    assert response.status_code == 302
