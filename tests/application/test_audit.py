"""Every call is audited with the integration key as its actor; a customer's own audit trail
shows the calls about it with actor type "integration"."""

import requests

from accounts.models import Membership
from accounts.services import api_key_create
from application.models import IntegrationCall, IntegrationKey
from audit.actors import Actor
from audit.models import AuditRecord
from tests.application.conftest import Billing
from tests.application.test_servers import order


def test_every_call_is_recorded_with_its_key_refusals_too(billing: Billing):
    billing.call("GET", "/nodes")
    billing.call("GET", "/servers/srv_nothing")

    calls = IntegrationCall.objects.order_by("occurred_at")
    key = IntegrationKey.objects.get()
    assert [(c.method, c.action, c.status_code) for c in calls] == [
        ("GET", "application.nodes", 200),
        ("GET", "application.server", 404),
    ]
    assert {c.integration_id for c in calls} == {key.pk} and calls[
        1
    ].error_code == "server_not_found"


def test_the_customers_audit_trail_shows_the_integration_as_actor(billing: Billing):
    customer = billing.customer()
    server = billing.call("POST", "/servers", order(customer)).json()
    owner = Membership.objects.get(organization_id=customer["id"])
    own_key = api_key_create(
        membership=owner, name="audit", scopes=["audit:read"], actor=Actor.system("test")
    ).full_key

    trail = requests.get(
        f"{billing.base}/api/public/v1/account/audit",
        headers={"Authorization": f"Bearer {own_key}"},
        timeout=10,
    ).json()["results"]

    by_integration = [r for r in trail if r["actor"]["type"] == "integration"]
    key_id = IntegrationKey.objects.get().key_id
    assert {r["actor"]["key_id"] for r in by_integration} == {key_id}
    assert ("POST", "application.servers", 201, server["id"]) in [
        (r["method"], r["action"], r["status_code"], r["server_id"]) for r in by_integration
    ]


def test_a_replayed_call_is_in_the_customers_trail_too(billing: Billing):
    customer = billing.customer()
    for _ in range(2):
        billing.call("POST", "/servers", order(customer), **{"Idempotency-Key": "k-1"})

    creates = AuditRecord.objects.filter(
        organization_id=customer["id"], action="application.servers", actor_type="integration"
    )

    assert creates.count() == 2 and len({r.server_id for r in creates}) == 1
