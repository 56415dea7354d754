"""A database that cannot be reached (a restarted pooler, a failover) answers 503 with
Retry-After, in the API's envelope, wherever the request was when the connection failed; and
the settings for PgBouncer in transaction mode keep nothing across transactions."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import NO_SCOPE_REQUIRED
from gshost.urls import handler500 as handler500  # this module is the tests' urlconf
from tests.conftest import API, client_for, error_of

ROOT = Path(__file__).resolve().parents[2]


class LostConnectionView(APIView):
    scopes = {"GET": NO_SCOPE_REQUIRED}

    def get(self, request: Request) -> Response:
        raise OperationalError("server closed the connection unexpectedly")


def panel_page(request: HttpRequest) -> HttpResponse:
    raise InterfaceError("connection already closed")


urlpatterns = [
    path("api/public/v1/test/lost-connection", LostConnectionView.as_view()),
    path("test/lost-connection", panel_page),
    path("", include("gshost.urls")),
]

with_test_views = pytest.mark.urls(__name__)


@with_test_views
def test_it_answers_503_in_the_envelope_when_a_view_loses_the_database(make_key):
    response = client_for(make_key()).get(f"{API}/test/lost-connection")
    assert response.status_code == 503
    assert error_of(response)["code"] == "service_unavailable"
    assert error_of(response)["retry_after"] == int(response["Retry-After"])


def test_it_answers_503_in_the_envelope_when_a_middleware_loses_the_database(make_key, monkeypatch):
    def lost(*args: object) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr("gshost.api.middleware.record_api_call", lost)
    client = client_for(make_key())
    client.raise_request_exception = False
    response = client.get(f"{API}/account/keys/current")
    assert response.status_code == 503
    assert error_of(response)["code"] == "service_unavailable"
    assert response["X-Request-Id"]


@with_test_views
def test_a_page_outside_the_api_answers_503_with_retry_after_when_the_database_is_lost(client):
    client.raise_request_exception = False
    response = client.get("/test/lost-connection")
    assert response.status_code == 503
    assert response["Retry-After"]


def _database_settings(pooler: str) -> dict[str, object]:
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "gshost.settings",
        "DEBUG": "true",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:6432/gshost",
        "DATABASE_POOLER": pooler,
    }
    code = (
        "import json, django; django.setup(); from django.conf import settings; "
        "print(json.dumps(settings.DATABASES['default']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_behind_pgbouncer_no_cursor_or_prepared_statement_outlives_a_transaction():
    database = _database_settings("pgbouncer")
    assert database["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert database["OPTIONS"]["prepare_threshold"] is None


def test_an_unknown_pooler_stops_the_service_at_start():
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _database_settings("pgpool")
    assert "DATABASE_POOLER" in refused.value.stderr
