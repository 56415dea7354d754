"""Customers: an organization and its owner, found only by exact lookups."""

from datetime import timedelta
from urllib.parse import urlsplit

from django.core import mail

from accounts.models import Organization, User
from application.models import OwnerLink
from audit.actors import Actor
from servers.services import server_create
from tests.application.conftest import Billing, error_code, mint


def test_a_new_customer_is_created_with_its_owner(billing: Billing):
    body = {
        "external_id": "c-1",
        "name": "Shop",
        "owner": {"email": "Ann@Shop.test", "name": "Ann"},
    }

    answer = billing.call("POST", "/customers", body)

    assert answer.status_code == 201
    customer = answer.json()
    assert customer["id"].startswith("org_") and customer["external_id"] == "c-1"
    assert customer["owner"] == {"email": "ann@shop.test", "name": "Ann"}
    assert customer["created_at"].endswith("Z")
    assert Organization.objects.get(id=customer["id"]).memberships.get().role == "owner"


def test_a_new_owner_is_emailed_a_link_to_set_a_password_once(billing: Billing, client):
    billing.customer(email="ann@shop.test")
    [message] = mail.outbox
    [url] = [word for word in message.body.split() if "/set-password/" in word]
    path = urlsplit(url).path

    shown = client.get(path)
    chosen = {"new_password1": "a-long-new-pw-42", "new_password2": "a-long-new-pw-42"}
    first = client.post(path, chosen)
    again = client.post(path, chosen)

    assert shown.status_code == 200 and first.status_code == 302
    assert User.objects.get(email="ann@shop.test").check_password("a-long-new-pw-42")
    assert again.status_code == 302 and again["Location"] == "/accounts/login/"
    link = OwnerLink.objects.get()
    assert link.expires_at - link.created_at == timedelta(hours=24)


def test_a_lookup_by_email_is_exact_and_ignores_case(billing: Billing):
    billing.customer("c-1", "a@x.io")
    billing.customer("c-2", "aa@x.io")

    found = billing.call("GET", "/customers?email=A@X.IO").json()["results"]

    assert [c["external_id"] for c in found] == ["c-1"]
    for partial in ("x.io", "a_@x.io", "%@x.io", ""):
        assert billing.call("GET", "/customers", params={"email": partial}).json()["results"] == []


def test_a_lookup_by_external_id_is_exact(billing: Billing):
    billing.customer("c-1", "a@x.io")
    billing.customer("c-11", "b@x.io")

    found = billing.call("GET", "/customers?external_id=c-1").json()["results"]
    empty = billing.call("GET", "/customers?external_id=").json()["results"]

    assert [c["external_id"] for c in found] == ["c-1"] and empty == []


def test_the_same_create_again_answers_the_same_customer(billing: Billing):
    first = billing.customer("c-1")

    again = billing.call(
        "POST",
        "/customers",
        {"external_id": "c-1", "name": "Shop", "owner": {"email": "owner@shop.test", "name": "O"}},
    )

    assert again.status_code == 200 and again.json()["id"] == first["id"]
    assert Organization.objects.count() == 1


def test_another_customer_under_a_known_external_id_is_a_conflict(billing: Billing):
    billing.customer("c-1", "a@x.io")

    answer = billing.call(
        "POST", "/customers", {"external_id": "c-1", "name": "Other", "owner": {"email": "b@x.io"}}
    )

    assert answer.status_code == 409 and error_code(answer) == "external_id_conflict"
    assert Organization.objects.count() == 1


def test_patch_changes_only_what_it_sends(billing: Billing):
    customer = billing.customer("c-1")

    answer = billing.call("PATCH", f"/customers/{customer['id']}", {"name": "Shop GmbH"})

    assert answer.status_code == 200
    assert answer.json() == {**customer, "name": "Shop GmbH"}


def test_a_customer_with_servers_cannot_be_deleted(billing: Billing):
    customer = billing.customer()
    organization = Organization.objects.get(id=customer["id"])
    server_create(organization=organization, name="mc", actor=Actor.system("test"))

    refused = billing.call("DELETE", f"/customers/{customer['id']}")

    assert refused.status_code == 409 and error_code(refused) == "customer_has_servers"
    assert Organization.objects.filter(id=customer["id"]).exists()


def test_a_customer_without_servers_is_deleted(billing: Billing):
    customer = billing.customer()

    deleted = billing.call("DELETE", f"/customers/{customer['id']}")
    after = billing.call("GET", f"/customers/{customer['id']}")

    assert deleted.status_code == 204
    assert after.status_code == 404 and error_code(after) == "not_found"


def test_a_customer_body_with_a_wrong_type_is_invalid_request(billing: Billing):
    answer = billing.call("POST", "/customers", {"external_id": 7, "name": "S", "owner": {}})

    assert answer.status_code == 400 and error_code(answer) == "invalid_request"
    assert set(answer.json()["error"]["fields"]) == {"external_id", "owner"}


def test_an_owner_who_has_a_password_already_gets_no_link(billing: Billing, alice):
    answer = billing.call(
        "POST",
        "/customers",
        {"external_id": "c-1", "name": "Two", "owner": {"email": "alice@acme.test"}},
    )

    assert answer.status_code == 201 and mail.outbox == []
    assert User.objects.get(email="alice@acme.test").check_password("alice-pw-123")


def test_another_integrations_external_ids_are_not_found(billing: Billing):
    billing.customer("c-1")

    found = billing.call("GET", "/customers?external_id=c-1", key=mint()).json()["results"]

    assert found == []
