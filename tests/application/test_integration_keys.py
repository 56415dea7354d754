"""Integration keys (gsi_): checked like customer keys, and good only on the Application API."""

from io import StringIO

import pytest
import requests
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.keys import checksum
from application.integration_keys import integration_key_create, integration_key_revoke
from application.models import IntegrationKey
from gshost.errors import InvalidInput
from tests.application.conftest import APP, Billing, error_code, mint


def test_a_customer_key_is_refused_on_the_application_api(billing: Billing, make_key):
    customer_key = make_key(["servers:read"]).full_key

    answer = billing.call("GET", "/nodes", key=customer_key)

    assert answer.status_code == 401 and error_code(answer) == "invalid_token"
    assert answer.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


def test_an_integration_key_is_refused_on_the_customer_api(billing: Billing):
    answer = requests.get(
        f"{billing.base}/api/public/v1/servers",
        headers={"Authorization": f"Bearer {billing.key}"},
        timeout=10,
    )

    assert answer.status_code == 401 and error_code(answer) == "invalid_token"


def test_a_key_is_gsi_with_an_8_character_id_and_a_43_character_checksummed_secret(db):
    key = mint()

    prefix, key_id, secret = key.split("_")
    assert (prefix, len(key_id), len(secret)) == ("gsi", 8, 43)
    assert secret[-6:] == checksum(key[:-6])
    assert IntegrationKey.objects.get(key_id=key_id).secret_hash not in key


def test_a_mistyped_key_is_refused_without_reading_the_database(db):
    key = mint()
    typo = key[:20] + ("A" if key[20] != "A" else "B") + key[21:]

    with CaptureQueriesContext(connection) as queries:
        answer = Client().get(f"{APP}/nodes", HTTP_AUTHORIZATION=f"Bearer {typo}")

    assert answer.status_code == 401 and error_code(answer) == "invalid_token"
    assert len(queries) == 0


def test_a_revoked_key_is_refused_at_once(billing: Billing):
    integration_key_revoke(key=IntegrationKey.objects.get())

    answer = billing.call("GET", "/nodes")

    assert answer.status_code == 401 and error_code(answer) == "token_revoked"


def test_a_key_is_refused_outside_its_allowed_ips(billing: Billing):
    key = mint(allowed_ips=["192.0.2.0/24"])

    answer = billing.call("GET", "/nodes", key=key)

    assert answer.status_code == 403 and error_code(answer) == "ip_not_allowed"


def test_a_key_without_the_scope_is_refused_naming_it(billing: Billing):
    key = mint(["customers:read"])

    answer = billing.call("GET", "/nodes", key=key)

    assert answer.status_code == 403 and answer.json()["error"]["required_scope"] == "nodes:read"


def test_a_call_records_when_the_key_was_last_used(billing: Billing):
    billing.call("GET", "/nodes")

    assert IntegrationKey.objects.get().last_used_ip == "127.0.0.1"


@pytest.mark.usefixtures("one_rate_window")
def test_the_rate_limit_is_per_key_with_its_headers(db, settings):
    settings.API_RATE_APPLICATION = "2/min"
    key = mint()
    calls = [Client().get(f"{APP}/nodes", HTTP_AUTHORIZATION=f"Bearer {key}") for _ in range(3)]

    assert [c.status_code for c in calls] == [200, 200, 429]
    assert calls[0]["X-RateLimit-Limit"] == "2" and calls[1]["X-RateLimit-Remaining"] == "0"
    assert error_code(calls[2]) == "rate_limited" and "Retry-After" in calls[2]


def test_createintegrationkey_prints_a_key_that_works(db):
    out = StringIO()
    call_command("createintegrationkey", "blesta", "--scopes", "nodes:read", stdout=out)
    key = out.getvalue().strip()

    answer = Client().get(f"{APP}/nodes", HTTP_AUTHORIZATION=f"Bearer {key}")

    assert key.startswith("gsi_") and answer.status_code == 200
    assert IntegrationKey.objects.get().name == "blesta"


def test_an_unknown_scope_is_refused_when_minting(db):
    with pytest.raises(InvalidInput, match="servers:reed"):
        integration_key_create(name="x", scopes=["servers:reed"])


def test_staff_mint_a_key_in_admin_and_see_it_once(staff_client):
    form = {"name": "paymenter", "scopes": ["servers:read", "nodes:read"], "allowed_ips": ""}

    answer = staff_client.post("/admin/application/integrationkey/add/", form, follow=True)

    key = IntegrationKey.objects.get()
    shown = [w for m in answer.context["messages"] for w in str(m).split() if w.count("_") == 2]
    assert len(shown) == 1 and shown[0].startswith(f"gsi_{key.key_id}_")
    assert key.scopes == ["nodes:read", "servers:read"]
    listing = staff_client.get("/admin/application/integrationkey/").content.decode()
    assert shown[0] not in listing  # the full key is never shown again


def test_staff_revoke_a_key_from_the_admin_list(staff_client):
    key = integration_key_create(name="old", scopes=["nodes:read"])

    staff_client.post(
        "/admin/application/integrationkey/",
        {"action": "revoke", "_selected_action": [key.key.pk]},
    )

    answer = Client().get(f"{APP}/nodes", HTTP_AUTHORIZATION=f"Bearer {key.full_key}")
    assert answer.status_code == 401 and error_code(answer) == "token_revoked"
