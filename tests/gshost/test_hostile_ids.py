"""Path ids and cursors holding NUL, surrogates or other unprintable characters, on every route
of the API: a 404 or a 400 invalid_request, never a 5xx, on PostgreSQL as on SQLite."""

import base64
import json
import re
from typing import Any
from urllib.parse import quote

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from accounts.scopes import CATALOGUE
from audit.actors import Actor
from servers.models import Server
from tests.conftest import API, client_for, error_of
from tests.webhooks.webhook_fixtures import make_delivery
from webhooks.models import DeliveryStatus
from webhooks.services import webhook_create

_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")
_NOT_ROUTES = {"schema/", "docs/"}


def _api_routes() -> list[tuple[str, str]]:
    """(method, route) of every view under the API prefix, as declared in the URL patterns."""
    routes: list[tuple[str, str]] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and route.startswith("api/public/v1/"):
                actions = getattr(pattern.callback, "actions", None) or {}
                for method in actions:
                    routes.append((method, route.removeprefix("api/public/v1/")))

    walk(get_resolver().url_patterns, "")
    return sorted({r for r in routes if r[1] not in _NOT_ROUTES})


ROUTES = _api_routes()
ID_ROUTES = [(method, route) for method, route in ROUTES if "<" in route]
LIST_ROUTES = [(method, route) for method, route in ROUTES if method == "get"]

UNPRINTABLE = st.one_of(
    st.sampled_from(["\x00", "\ud800", "\udfff", "\x7f", "\x1b", "\u202e", "\u2028"]),
    st.characters(categories=["Cc", "Cs", "Cf", "Co", "Cn", "Zl", "Zp"]),
)
HOSTILE_ID = st.builds(
    lambda prefix, head, bad, tail: prefix + head + bad + tail,
    st.sampled_from(["", "srv_", "whk_", "dlv_", "job_", "sch_", "bkp_", "gsk_"]),
    st.text(alphabet="0123456789abcdefABCDEF", max_size=20),
    st.text(alphabet=UNPRINTABLE, min_size=1, max_size=3).filter(lambda s: s != "/"),
    st.text(max_size=4).filter(lambda s: "/" not in s),
)


def in_path(value: str) -> str:
    """Percent-encoded as a client would send it (a lone surrogate as its UTF-8 bytes)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


@pytest.fixture
def world(settings, make_key, acme, acme_server: Server) -> dict[str, Any]:
    settings.API_RATE_DEFAULT = settings.API_RATE_REALTIME = "1000000/min"
    webhook, _ = webhook_create(
        organization=acme,
        url="https://hooks.example.com/x",
        events=["server.started"],
        actor=Actor.system("tests"),
    )
    delivery = make_delivery(webhook, status=DeliveryStatus.FAILED, server_id=acme_server.id)
    valid = {
        "server_id": acme_server.id,
        "webhook_id": webhook.id,
        "delivery_id": delivery.id,
        "key_id": "zzzzzzzz",
        "schedule_id": "sch_doesNotExist0000000",
        "backup_id": "bkp_doesNotExist0000000",
        "job_id": "job_doesNotExist0000000",
    }
    return {"client": client_for(make_key(sorted(CATALOGUE))), "valid": valid}


def _call(client: Any, method: str, url: str) -> Any:
    if method in ("get", "delete"):
        return getattr(client, method)(url)
    return getattr(client, method)(url, {}, format="json")


def _assert_refused(response: Any, where: str) -> None:
    assert response.status_code < 500, (where, response.content[:300])
    if response.status_code >= 400:
        assert "error" in response.json(), where


HYPOTHESIS = hypothesis_settings(
    max_examples=20,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)


@HYPOTHESIS
@pytest.mark.parametrize(("method", "route"), ID_ROUTES, ids=lambda v: str(v))
@given(data=st.data())
def test_no_path_id_gets_a_server_error(world, method, route, data) -> None:
    names = _PARAMETER.findall(route)
    hostile = data.draw(st.sets(st.sampled_from(names), min_size=1))
    ids = {
        name: in_path(data.draw(HOSTILE_ID)) if name in hostile else world["valid"][name]
        for name in names
    }
    url = f"{API}/" + _PARAMETER.sub(lambda m: ids[m.group(1)], route)
    response = _call(world["client"], method, url)
    _assert_refused(response, f"{method} {url}")
    # 403: DELETE /account/keys/{id} of any key but the caller's own is self_revocation_only.
    assert response.status_code in (400, 403, 404), (method, url, response.status_code)


def _cursor(payload: Any) -> str:
    raw = json.dumps(payload, ensure_ascii=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


CURSORS = st.one_of(
    st.builds(
        lambda pk, backwards: _cursor({"t": "2026-11-22T10:00:00+00:00", "i": pk, "b": backwards}),
        HOSTILE_ID,
        st.booleans(),
    ),
    st.builds(lambda t: _cursor({"t": t, "i": "srv_x", "b": False}), HOSTILE_ID),
    st.text(max_size=30),
)


@HYPOTHESIS
@pytest.mark.parametrize(("method", "route"), LIST_ROUTES, ids=lambda v: str(v))
@given(cursor=CURSORS)
def test_no_cursor_gets_a_server_error(world, method, route, cursor) -> None:
    url = f"{API}/" + _PARAMETER.sub(lambda m: world["valid"][m.group(1)], route)
    response = world["client"].get(url, {"cursor": cursor})
    _assert_refused(response, f"{url} cursor={cursor!r}")


@pytest.mark.parametrize(
    "path",
    [
        "/webhooks/whk_%00",
        "/webhooks/%00/stats",
        "/jobs/job_%00",
        "/servers/%00",
    ],
)
def test_a_nul_in_a_path_id_is_not_found(world, path) -> None:
    response = world["client"].get(API + path)
    assert response.status_code == 404
    assert error_of(response)["code"] in ("not_found", "server_not_found")


def test_a_nul_in_a_server_id_is_server_not_found(world) -> None:
    response = world["client"].get(f"{API}/servers/srv_%00")
    assert (response.status_code, error_of(response)["code"]) == (404, "server_not_found")


def test_a_nul_in_a_delivery_id_is_not_found(world) -> None:
    url = f"{API}/webhooks/{world['valid']['webhook_id']}/deliveries/dlv_%00"
    assert world["client"].get(url).status_code == 404


@pytest.mark.parametrize("pk", ["dlv_\x00", "dlv_\ud800"])
def test_a_cursor_naming_an_unprintable_id_is_400(world, pk) -> None:
    url = f"{API}/webhooks/{world['valid']['webhook_id']}/deliveries"
    cursor = _cursor({"t": "2026-11-22T10:00:00+00:00", "i": pk, "b": False})
    response = world["client"].get(url, {"cursor": cursor})
    assert (response.status_code, error_of(response)["code"]) == (400, "invalid_request")


def test_every_route_is_walked() -> None:
    assert len(ROUTES) >= 30
    assert ("get", "jobs/<str:job_id>") in ROUTES
    assert ("delete", "account/keys/<str:key_id>") in ROUTES
