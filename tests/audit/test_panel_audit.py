"""The panel's audit page: the organization's last 24 hours, with the API's filters."""

from datetime import timedelta

import pytest
from django.utils import timezone
from freezegun import freeze_time

from audit.models import ActorType, AuditRecord, Source
from tests.conftest import API, client_for

AUDIT = "/panel/audit/"


def api_record(organization, **fields) -> AuditRecord:
    values = {
        "source": Source.API,
        "actor_type": ActorType.API_KEY,
        "actor_key_id": "AAAAAAAA",
        "method": "GET",
        "path": f"{API}/servers",
        "action": "server-list",
        "status_code": 200,
        **fields,
    }
    return AuditRecord.objects.create(organization=organization, **values)


def test_it_shows_the_calls_made_with_the_organizations_keys(alice_client, make_key):
    key = make_key()
    client_for(key).get(f"{API}/account/keys/current")
    page = alice_client.get(AUDIT).content.decode()
    assert key.key_id in page
    assert f"{API}/account/keys/current" in page


def test_it_shows_panel_actions_with_the_person_who_did_them(alice_client):
    alice_client.post("/panel/keys/new", {"name": "ci", "scopes": ["servers:read"]})
    page = alice_client.get(AUDIT).content.decode()
    assert "key.create" in page
    assert "alice@acme.test" in page


def test_it_hides_other_organizations_records(alice_client, globex):
    api_record(globex, path="/api/public/v1/globex-only")
    assert "globex-only" not in alice_client.get(AUDIT).content.decode()


def test_it_hides_records_older_than_24_hours(alice_client, acme):
    with freeze_time(timezone.now() - timedelta(hours=25)):
        api_record(acme, path="/api/public/v1/yesterday")
    api_record(acme, path="/api/public/v1/today")
    page = alice_client.get(AUDIT).content.decode()
    assert "/today" in page
    assert "/yesterday" not in page


def test_it_lists_the_newest_first(alice_client, acme):
    with freeze_time(timezone.now() - timedelta(minutes=5)):
        api_record(acme, path="/api/public/v1/older")
    api_record(acme, path="/api/public/v1/newer")
    page = alice_client.get(AUDIT).content.decode()
    assert page.index("/newer") < page.index("/older")


@pytest.mark.parametrize(
    ("query", "shown", "hidden"),
    [
        ("key_id=BBBBBBBB", "/by-b", "/by-a"),
        ("status_code=404", "/missing", "/by-a"),
        ("outcome=rejected", "/missing", "/by-a"),
        ("server_id=srv_one", "/on-server", "/by-a"),
    ],
)
def test_it_filters_like_the_api(alice_client, acme, query, shown, hidden):
    api_record(acme, path="/by-a")
    api_record(acme, path="/by-b", actor_key_id="BBBBBBBB")
    api_record(acme, path="/missing", status_code=404, error_code="server_not_found")
    api_record(acme, path="/on-server", server_id="srv_one")
    page = alice_client.get(f"{AUDIT}?{query}").content.decode()
    assert shown in page
    assert hidden not in page


def test_it_refuses_an_invalid_filter(alice_client):
    assert alice_client.get(f"{AUDIT}?status_code=abc").status_code == 400


def test_it_shows_at_most_200_records_and_says_so(alice_client, acme):
    AuditRecord.objects.bulk_create(
        AuditRecord(
            organization=acme,
            source=Source.API,
            actor_type=ActorType.API_KEY,
            actor_key_id="AAAAAAAA",
            action="server-list",
            path=f"/row-{n:03d}/",
            status_code=200,
        )
        for n in range(201)
    )
    response = alice_client.get(AUDIT)
    page = response.content.decode()
    assert page.count("/row-") == 200
    assert "the newest 200 records" in page


def test_it_needs_a_signed_in_member(client, acme):
    assert client.get(AUDIT).status_code == 302
