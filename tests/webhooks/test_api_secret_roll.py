"""POST /webhooks/{id}/secret/rotate: a new secret shown once, the old one signing during grace."""

from datetime import timedelta

import pytest
from django.utils import timezone
from freezegun import freeze_time

from audit.buffer import audit_buffer
from audit.models import AuditRecord
from tests.conftest import client_for, error_of
from tests.webhooks.webhook_fixtures import (
    HOOKS,
    admin_fixture,  # noqa: F401
    admin_key_fixture,  # noqa: F401
    create,
    outsider_fixture,  # noqa: F401
)
from webhooks.models import Webhook
from webhooks.secrets import decrypt_secret, signing_keys

START = "2026-11-20T10:00:00Z"


def roll(client, webhook_id, **body):
    return client.post(f"{HOOKS}/{webhook_id}/secret/rotate", body, format="json")


def keys_of(webhook_id):
    webhook = Webhook.objects.get(pk=webhook_id)
    return signing_keys(
        webhook.encrypted_secret,
        webhook.encrypted_previous_secret,
        webhook.previous_secret_expires_at,
    )


@pytest.fixture
def created(admin):
    return create(admin).json()


def test_it_answers_the_record_with_a_new_secret(admin, created):
    body = roll(admin, created["id"]).json()
    assert body["id"] == created["id"]
    assert body["url"] == created["url"]
    assert body["signing_secret"].startswith("whsec_")
    assert len(body["signing_secret"]) == 49
    assert body["signing_secret"] != created["signing_secret"]


@freeze_time(START)
def test_it_keeps_the_previous_secret_for_24_hours_by_default(admin, created):
    body = roll(admin, created["id"]).json()
    assert body["previous_secret_expires_at"] == "2026-11-21T10:00:00.000Z"


@freeze_time(START)
def test_it_takes_a_grace_period_in_hours(admin, created):
    body = roll(admin, created["id"], grace_hours=168).json()
    assert body["previous_secret_expires_at"] == "2026-11-27T10:00:00.000Z"


def test_it_answers_null_expiry_for_no_grace(admin, created):
    body = roll(admin, created["id"], grace_hours=0).json()
    assert body["previous_secret_expires_at"] is None
    assert keys_of(created["id"]).previous is None


def test_it_stores_the_new_secret_encrypted(admin, created):
    secret = roll(admin, created["id"]).json()["signing_secret"]
    stored = Webhook.objects.get(pk=created["id"])
    assert secret not in stored.encrypted_secret
    assert decrypt_secret(stored.encrypted_secret) == secret


def test_it_stores_the_previous_secret_encrypted(admin, created):
    roll(admin, created["id"])
    stored = Webhook.objects.get(pk=created["id"])
    assert created["signing_secret"] not in stored.encrypted_previous_secret
    assert decrypt_secret(stored.encrypted_previous_secret) == created["signing_secret"]


def test_it_signs_with_both_secrets_during_the_grace_period(admin, created):
    with freeze_time(START):
        new = roll(admin, created["id"]).json()["signing_secret"]
    with freeze_time("2026-11-21T09:59:59Z"):
        keys = keys_of(created["id"])
    assert (keys.current, keys.previous) == (new, created["signing_secret"])


def test_it_signs_with_the_new_secret_alone_once_the_grace_is_over(admin, created):
    with freeze_time(START):
        new = roll(admin, created["id"]).json()["signing_secret"]
    with freeze_time("2026-11-21T10:00:00Z"):
        keys = keys_of(created["id"])
    assert (keys.current, keys.previous) == (new, None)


def test_it_ends_an_earlier_grace_when_rolled_again(admin, created):
    first = roll(admin, created["id"]).json()["signing_secret"]
    second = roll(admin, created["id"]).json()["signing_secret"]
    keys = keys_of(created["id"])
    assert (keys.current, keys.previous) == (second, first)


@pytest.mark.parametrize("grace", [-1, 169, "24", 2.5, True, None])
def test_it_refuses_a_bad_grace_period_naming_the_field(admin, created, grace):
    response = roll(admin, created["id"], grace_hours=grace)
    assert response.status_code == 400
    assert "grace_hours" in error_of(response)["fields"]


def test_it_leaves_the_secret_alone_when_refused(admin, created):
    roll(admin, created["id"], grace_hours=500)
    assert keys_of(created["id"]).current == created["signing_secret"]


def test_it_needs_the_manage_scope(make_key, created):
    reader = client_for(make_key(["webhooks:read", "webhooks:write"]))
    response = roll(reader, created["id"])
    assert response.status_code == 403
    assert error_of(response)["required_scope"] == "webhooks:manage"


def test_it_hides_another_organizations_webhook(outsider, created):
    assert roll(outsider, created["id"]).status_code == 404


def test_it_is_audited(admin, created):
    roll(admin, created["id"])
    audit_buffer.flush()
    record = AuditRecord.objects.get(action="webhooks.secret.rotate")
    assert (record.method, record.status_code) == ("POST", 200)


def test_it_updates_updated_at(admin, created):
    later = timezone.now() + timedelta(minutes=5)
    with freeze_time(later):
        body = roll(admin, created["id"]).json()
    assert body["updated_at"] != created["updated_at"]
