"""What the Application API keeps goes when it is due: stored answers after 24 h, links once
expired, call records with the audit's retention."""

from datetime import timedelta

import freezegun
from django.utils import timezone

from accounts.services import member_add, organization_create
from application.links import owner_link_create
from application.models import (
    IdempotentRequest,
    IntegrationCall,
    IntegrationKey,
    LinkPurpose,
    OwnerLink,
)
from application.retention import application_purge_expired
from tests.application.conftest import mint


def test_the_hourly_purge_drops_only_what_is_due(db, settings):
    mint()
    key = IntegrationKey.objects.get()
    organization = organization_create(slug="shop", name="Shop")
    owner = member_add(organization=organization, email="o@shop.test", password=None, owner=True)
    start = timezone.now()
    with freezegun.freeze_time(start):
        IdempotentRequest.objects.create(integration=key, key="old", request_hash="h")
        IntegrationCall.objects.create(
            integration=key, method="GET", path="/x", action="a", status_code=200
        )
        owner_link_create(user=owner.user, organization=organization, purpose=LinkPurpose.SIGN_IN)
    with freezegun.freeze_time(start + timedelta(hours=2)):
        IdempotentRequest.objects.create(integration=key, key="new", request_hash="h")

    with freezegun.freeze_time(start + timedelta(hours=settings.AUDIT_RETENTION_HOURS, minutes=1)):
        gone = application_purge_expired()

    assert gone == 3
    assert list(IdempotentRequest.objects.values_list("key", flat=True)) == ["new"]
    assert not IntegrationCall.objects.exists() and not OwnerLink.objects.exists()
