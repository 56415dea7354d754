"""No input reaches a 5xx: oversized bodies are 413, unusable date-times are 400 naming the
field, and a fuzzer throws hostile query and body values at every API route."""

from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client
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

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


MIB = 1024 * 1024
HOSTILE_DATETIMES = [
    "9999-12-31T23:59:59-23:59",
    "0001-01-01T00:00:00+23:59",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999Z",
    "1969-12-31T23:59:59Z",
    "2026-13-45T10:00:00Z",
    "2026-11-22T10:00:00",
]


@pytest.fixture
def owner_key(make_key) -> Any:
    return make_key(sorted(CATALOGUE))


@pytest.fixture
def webhook(acme) -> Any:
    hook, _ = webhook_create(
        organization=acme,
        url="https://hooks.example.com/x",
        events=["server.started"],
        actor=TEST_ACTOR,
    )
    return hook


def test_it_answers_413_to_a_body_over_one_mebibyte(owner_key):
    body = '{"url": "' + "a" * (20 * MIB) + '"}'
    response = client_for(owner_key).generic(
        "POST", f"{API}/webhooks", body, content_type="application/json"
    )
    assert response.status_code == 413
    assert error_of(response)["code"] == "payload_too_large"


def test_it_accepts_a_body_just_under_the_limit_as_far_as_size_goes(owner_key):
    body = '{"description": "' + "a" * (MIB - 100) + '"}'
    response = client_for(owner_key).generic(
        "POST", f"{API}/webhooks", body, content_type="application/json"
    )
    assert response.status_code == 400  # too long a description, not too large a body


def test_the_panel_refuses_a_huge_form_without_a_server_error(client: Client, alice):
    client.force_login(alice.user)
    response = client.post("/panel/keys/new", {"name": "x" * (2 * MIB)})
    assert response.status_code == 400


@pytest.mark.parametrize("value", HOSTILE_DATETIMES)
def test_the_audit_since_is_400_naming_the_field(owner_key, value):
    response = client_for(owner_key).get(f"{API}/account/audit", {"since": value})
    assert response.status_code == 400
    assert "since" in error_of(response)["fields"]


@pytest.mark.parametrize("field", ["since", "until"])
@pytest.mark.parametrize("value", HOSTILE_DATETIMES)
def test_the_bulk_redelivery_window_is_400_naming_the_field(owner_key, webhook, field, value):
    body = {"since": "2026-11-22T10:00:00Z", "until": "2026-11-22T11:00:00Z", field: value}
    response = client_for(owner_key).post(
        f"{API}/webhooks/{webhook.id}/deliveries/redeliver", body, format="json"
    )
    assert response.status_code == 400
    assert field in error_of(response)["fields"]


def test_a_window_from_year_1_to_9999_with_offsets_is_400(owner_key, webhook):
    body = {"since": "0001-01-01T00:00:00+14:00", "until": "9999-12-31T23:59:59-14:00"}
    response = client_for(owner_key).post(
        f"{API}/webhooks/{webhook.id}/deliveries/redeliver", body, format="json"
    )
    assert response.status_code == 400


def test_a_usable_since_is_still_accepted(owner_key):
    response = client_for(owner_key).get(f"{API}/account/audit", {"since": "2026-11-22T10:00Z"})
    assert response.status_code == 200


# The fuzzer

HOSTILE_TEXT = st.one_of(
    st.sampled_from(HOSTILE_DATETIMES),
    st.text(max_size=40),
    st.sampled_from(
        [
            *HOSTILE_DATETIMES,
            "-1",
            "0",
            "1e309",
            "NaN",
            "99999999999999999999999",
            "%00",
            "\x00",
            "srv_" + "A" * 500,
            "../../etc",
            "null",
            "[]",
            "{}",
            " ",
            "😀" * 10,
        ]
    ),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
)
JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    HOSTILE_TEXT,
)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
QUERY_NAMES = [
    "limit",
    "cursor",
    "since",
    "key_id",
    "status_code",
    "server_id",
    "status",
    "event",
    "window",
    "outcome",
]
BODY_NAMES = [
    "url",
    "token",
    "events",
    "event_types",
    "description",
    "active",
    "status",
    "event",
    "since",
    "until",
    "dry_run",
    "action",
    "command",
    "name",
    "server_id",
    "limit",
]

# (method, path); DELETE and the test ping (a real network call) are left out.
ROUTES = [
    ("get", "/account/audit"),
    ("get", "/account/keys"),
    ("get", "/account/keys/current"),
    ("post", "/keys/report-leaked"),
    ("get", "/servers"),
    ("get", "/servers/{server}"),
    ("get", "/servers/{server}/backups"),
    ("post", "/servers/{server}/backups"),
    ("get", "/servers/{server}/capabilities"),
    ("get", "/servers/{server}/config-events/status"),
    ("post", "/servers/{server}/console"),
    ("post", "/servers/{server}/maintenance"),
    ("get", "/servers/{server}/metrics"),
    ("get", "/servers/{server}/migration-status"),
    ("get", "/servers/{server}/players"),
    ("post", "/servers/{server}/power"),
    ("get", "/servers/{server}/realtime-stats"),
    ("get", "/servers/{server}/schedules"),
    ("get", "/servers/{server}/settings/drift"),
    ("get", "/servers/{server}/settings/history"),
    ("get", "/webhooks"),
    ("post", "/webhooks"),
    ("get", "/webhooks/{webhook}"),
    ("patch", "/webhooks/{webhook}"),
    ("get", "/webhooks/{webhook}/deliveries"),
    ("get", "/webhooks/{webhook}/deliveries/{delivery}"),
    ("post", "/webhooks/{webhook}/deliveries/{delivery}/redeliver"),
    ("post", "/webhooks/{webhook}/deliveries/redeliver"),
]

REQUESTS = st.tuples(
    st.dictionaries(st.sampled_from(QUERY_NAMES), HOSTILE_TEXT, max_size=4),
    st.one_of(
        st.dictionaries(st.sampled_from(BODY_NAMES), JSON_VALUE, max_size=5),
        JSON_VALUE,
    ),
)


@pytest.fixture
def fuzz_world(settings, owner_key, acme, acme_server: Server, webhook) -> dict[str, Any]:
    settings.API_RATE_DEFAULT = settings.API_RATE_REALTIME = "1000000/min"
    settings.LEAK_REPORT_RATE = "1000000/min"
    delivery = make_delivery(webhook, status=DeliveryStatus.FAILED, server_id=acme_server.id)
    ids = {"server": acme_server.id, "webhook": webhook.id, "delivery": delivery.id}
    return {"client": client_for(owner_key), "ids": ids}


@hypothesis_settings(
    max_examples=80,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
@pytest.mark.parametrize(("method", "path"), ROUTES)
@given(request=REQUESTS)
def test_no_hostile_query_or_body_gets_a_server_error(fuzz_world, method, path, request) -> None:
    query, body = request
    url = API + path.format(**fuzz_world["ids"])
    client = fuzz_world["client"]
    if method == "get":
        response = client.get(url, query)
    else:
        url += "?" + urlencode(query) if query else ""
        response = getattr(client, method)(url, body, format="json")
    assert response.status_code < 500, (method, url, query, body, response.content[:300])
