"""Rate limits: fixed one-minute windows per key and route, a per-address limit on failed
authentication, and the X-RateLimit-* headers on every response.

The default (300/min) is lowered through settings to keep the tests quick; the rule is the same.
"""

import socket
from datetime import UTC, datetime

import pytest
from freezegun import freeze_time

from accounts import key_records, keys
from audit.models import AuditRecord
from tests.conftest import API, client_for, error_of

CURRENT = f"{API}/account/keys/current"
WINDOW_START = "2026-11-22 10:00:00"
WINDOW_END_UNIX = int(datetime(2026, 11, 22, 10, 1, tzinfo=UTC).timestamp())


def well_formed_token(key_id: str, filler: str = "W") -> str:
    body = f"gsk_{key_id}_{filler * 37}"
    return body + keys.checksum(body)


@pytest.fixture
def five_a_minute(settings):
    settings.API_RATE_DEFAULT = "5/min"


@pytest.fixture
def frozen():
    with freeze_time(WINDOW_START) as frozen_time:
        yield frozen_time


def test_the_defaults_are_the_contracts(settings):
    assert settings.API_RATE_DEFAULT == "300/min"
    assert settings.API_RATE_REALTIME == "600/min"
    assert settings.AUTH_FAILURE_RATE == "30/min"


def test_the_call_after_the_limit_is_rate_limited(make_key, five_a_minute, frozen):
    client = client_for(make_key())
    codes = [client.get(CURRENT).status_code for _ in range(6)]
    assert codes == [200, 200, 200, 200, 200, 429]


def test_the_default_limit_lets_300_calls_through_and_refuses_the_301st(make_key, frozen):
    client = client_for(make_key())
    for _ in range(299):
        client.get(CURRENT)
    assert client.get(CURRENT).status_code == 200
    assert client.get(CURRENT).status_code == 429


def test_a_rate_limited_answer_says_when_to_retry(make_key, five_a_minute, frozen):
    client = client_for(make_key())
    frozen.tick(45)
    for _ in range(5):
        client.get(CURRENT)
    response = client.get(CURRENT)
    assert response.status_code == 429
    error = error_of(response)
    assert error["code"] == "rate_limited"
    assert error["retry_after"] == 15
    assert response["Retry-After"] == "15"


def test_remaining_counts_down_to_zero(make_key, five_a_minute, frozen):
    client = client_for(make_key())
    remaining = [client.get(CURRENT)["X-RateLimit-Remaining"] for _ in range(6)]
    assert remaining == ["4", "3", "2", "1", "0", "0"]


def test_every_response_carries_the_limit_headers(make_key, five_a_minute, frozen):
    key = make_key([])
    client = client_for(key)
    responses = {
        "ok": client.get(CURRENT),
        "forbidden": client.get(f"{API}/servers"),
        "unknown route": client.get(f"{API}/nowhere"),
        "method not allowed": client.post(CURRENT),
        "missing token": client_for(None).get(CURRENT),
        "invalid token": client_for(well_formed_token(key.key_id)).get(CURRENT),
    }
    for case, response in responses.items():
        headers = {h: response.get(h) for h in ("X-RateLimit-Limit", "X-RateLimit-Reset")}
        assert None not in headers.values(), case
        assert response.get("X-RateLimit-Remaining") is not None, case
        assert headers["X-RateLimit-Reset"] == str(WINDOW_END_UNIX), case


def test_the_limit_header_names_the_routes_limit(make_key, five_a_minute, frozen):
    assert client_for(make_key()).get(CURRENT)["X-RateLimit-Limit"] == "5"


def test_a_rate_limited_answer_carries_the_limit_headers(make_key, five_a_minute, frozen):
    client = client_for(make_key())
    for _ in range(5):
        client.get(CURRENT)
    response = client.get(CURRENT)
    assert (response["X-RateLimit-Limit"], response["X-RateLimit-Remaining"]) == ("5", "0")
    assert response["X-RateLimit-Reset"] == str(WINDOW_END_UNIX)


def test_the_window_does_not_refill_before_it_ends(make_key, five_a_minute, frozen):
    client = client_for(make_key())
    for _ in range(5):
        client.get(CURRENT)
    frozen.tick(59)
    assert client.get(CURRENT).status_code == 429


def test_the_window_resets_whole_at_the_next_minute(make_key, five_a_minute, frozen):
    client = client_for(make_key())
    for _ in range(6):
        client.get(CURRENT)
    frozen.tick(60)
    codes = [client.get(CURRENT).status_code for _ in range(6)]
    assert codes == [200, 200, 200, 200, 200, 429]


def test_another_route_is_not_affected(make_key, five_a_minute, frozen):
    client = client_for(make_key(["keys:read"]))
    for _ in range(6):
        client.get(CURRENT)
    assert client.get(f"{API}/account/keys").status_code == 200


def test_another_key_is_not_affected(make_key, five_a_minute, frozen):
    busy, quiet = make_key(), make_key()
    for _ in range(6):
        client_for(busy).get(CURRENT)
    assert client_for(quiet).get(CURRENT).status_code == 200


def test_one_route_is_one_budget_whatever_the_id_in_the_path(
    make_key, five_a_minute, frozen, acme_server, acme_other_server
):
    client = client_for(make_key(["servers:read"]))
    for _ in range(5):
        client.get(f"{API}/servers/{acme_server.id}")
    assert client.get(f"{API}/servers/{acme_other_server.id}").status_code == 429


# Failed authentication, per client address


@pytest.fixture
def three_failures_a_minute(settings):
    settings.AUTH_FAILURE_RATE = "3/min"


def test_the_fourth_bad_token_from_an_address_is_rate_limited(db, three_failures_a_minute, frozen):
    codes = [client_for(well_formed_token("Zz9Zz9Zz", f)).get(CURRENT).status_code for f in "abcd"]
    assert codes == [401, 401, 401, 429]


def test_the_failure_limit_answer_says_when_to_retry(db, three_failures_a_minute, frozen):
    frozen.tick(20)
    for f in "abc":
        client_for(well_formed_token("Zz9Zz9Zz", f)).get(CURRENT)
    response = client_for("gsk_typo").get(CURRENT)
    assert response.status_code == 429
    assert error_of(response)["retry_after"] == 40
    assert response["Retry-After"] == "40"


def test_malformed_tokens_count_as_failures_too(db, three_failures_a_minute, frozen):
    codes = [client_for(f"sk_live_{n}").get(CURRENT).status_code for n in range(4)]
    assert codes == [401, 401, 401, 429]


def test_failures_from_one_address_do_not_limit_another(db, three_failures_a_minute, frozen):
    for _ in range(4):
        client_for("sk_live_x").get(CURRENT, REMOTE_ADDR="198.51.100.1")
    response = client_for("sk_live_x").get(CURRENT, REMOTE_ADDR="198.51.100.2")
    assert response.status_code == 401


def test_failures_do_not_stop_a_valid_key_from_the_same_address(
    make_key, three_failures_a_minute, frozen
):
    key = make_key()
    for _ in range(4):
        client_for("sk_live_x").get(CURRENT)
    assert client_for(key).get(CURRENT).status_code == 200


def test_the_failure_window_resets_at_the_next_minute(db, three_failures_a_minute, frozen):
    for _ in range(4):
        client_for("sk_live_x").get(CURRENT)
    frozen.tick(60)
    assert client_for("sk_live_x").get(CURRENT).status_code == 401


def test_a_failure_answer_reports_the_failure_budget(db, three_failures_a_minute, frozen):
    response = client_for("sk_live_x").get(CURRENT)
    assert (response["X-RateLimit-Limit"], response["X-RateLimit-Remaining"]) == ("3", "2")


def test_a_failure_limited_call_naming_a_known_key_is_audited(
    make_key, three_failures_a_minute, frozen
):
    key = make_key()
    for f in "abcd":
        client_for(well_formed_token(key.key_id, f)).get(CURRENT)
    rows = AuditRecord.objects.filter(actor_key_id=key.key_id)
    assert sorted(r.status_code for r in rows) == [401, 401, 401, 429]


# X-Forwarded-For: believed only from trusted proxies


def test_forwarded_for_from_an_untrusted_peer_cannot_dodge_the_failure_limit(
    db, three_failures_a_minute, frozen, settings
):
    settings.TRUSTED_PROXIES = []
    codes = [
        client_for("sk_live_x").get(CURRENT, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code
        for n in range(4)
    ]
    assert codes == [401, 401, 401, 429]


def test_forwarded_for_from_a_trusted_proxy_names_the_client(
    db, three_failures_a_minute, frozen, settings
):
    settings.TRUSTED_PROXIES = ["127.0.0.1/32"]
    codes = [
        client_for("sk_live_x").get(CURRENT, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code
        for n in range(4)
    ]
    assert codes == [401, 401, 401, 401]


def audited_ip(make_key, **headers: str) -> str | None:
    key = make_key()
    client_for(key).get(CURRENT, **headers)
    return AuditRecord.objects.get(actor_key_id=key.key_id).ip


def test_the_audit_records_remote_addr_when_no_proxy_is_trusted(make_key, settings):
    settings.TRUSTED_PROXIES = []
    ip = audited_ip(make_key, REMOTE_ADDR="198.51.100.7", HTTP_X_FORWARDED_FOR="203.0.113.5")
    assert ip == "198.51.100.7"


def test_the_audit_records_the_forwarded_client_behind_a_trusted_proxy(make_key, settings):
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    ip = audited_ip(make_key, REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.5")
    assert ip == "203.0.113.5"


def test_the_client_is_the_nearest_untrusted_hop(make_key, settings):
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    ip = audited_ip(
        make_key,
        REMOTE_ADDR="10.0.0.2",
        HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.5, 10.0.0.9",  # the client wrote 6.6.6.6
    )
    assert ip == "203.0.113.5"


def test_a_key_allowlist_judges_the_forwarded_client(make_key, settings):
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    key = make_key(allowed_ips=["203.0.113.0/24"])
    behind_proxy = client_for(key).get(
        CURRENT, REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.5"
    )
    spoofed = client_for(key).get(
        CURRENT, REMOTE_ADDR="198.51.100.1", HTTP_X_FORWARDED_FOR="203.0.113.5"
    )
    assert (behind_proxy.status_code, spoofed.status_code) == (200, 403)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_it_answers_and_counts_locally_while_redis_is_unreachable(
    make_key, settings, five_a_minute, frozen
):
    settings.REDIS_URL = f"redis://127.0.0.1:{_closed_port()}/0"
    client = client_for(make_key())

    statuses = [client.get(CURRENT).status_code for _ in range(6)]

    assert statuses == [200, 200, 200, 200, 200, 429]


def test_a_key_is_authenticated_from_the_database_while_redis_is_unreachable(make_key, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{_closed_port()}/0"
    key = make_key()
    key_records.forget_all()  # nothing cached in this process: the snapshot comes from the DB

    response = client_for(key).get(CURRENT)

    assert response.status_code == 200
    assert response.json()["id"] == key.key_id
