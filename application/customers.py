"""Customers: an organization and its owner, sold through an integration under its external
id. A new owner is emailed a one-time link (24 h) to set a password."""

import secrets
from dataclasses import dataclass
from typing import Any

from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils.text import slugify

from accounts.models import Organization, User
from accounts.services import member_add, organization_create
from application.errors import CustomerHasServers, ExternalIdConflict
from application.links import owner_link_create
from application.models import Customer, LinkPurpose
from servers.models import Server

SLUG_STEM = 40


@dataclass(frozen=True)
class CustomerInput:
    external_id: str
    name: str
    owner_email: str
    owner_name: str
    request_hash: str


def _slug_for(name: str) -> str:
    return f"{slugify(name)[:SLUG_STEM] or 'customer'}-{secrets.token_hex(4)}"


def _same_or_conflict(customer: Customer, data: CustomerInput) -> tuple[Organization, bool]:
    if customer.request_hash != data.request_hash:
        raise ExternalIdConflict("customer", customer.organization_id)
    return customer.organization, False


def _known(integration_pk: int, external_id: str) -> Customer | None:
    return (
        Customer.objects.select_related("organization")
        .filter(integration_id=integration_pk, external_id=external_id)
        .first()
    )


def customer_create(*, integration_pk: int, data: CustomerInput) -> tuple[Organization, bool]:
    """The new customer (and True), or the one this integration already made under that
    external id from the same body (and False); ExternalIdConflict for another body."""
    known = _known(integration_pk, data.external_id)
    if known is not None:
        return _same_or_conflict(known, data)
    try:
        with transaction.atomic():
            new_person = not User.objects.filter(email__iexact=data.owner_email).exists()
            organization = organization_create(slug=_slug_for(data.name), name=data.name)
            membership = member_add(
                organization=organization, email=data.owner_email, password=None, owner=True
            )
            Customer.objects.create(
                organization=organization,
                integration_id=integration_pk,
                external_id=data.external_id,
                owner_name=data.owner_name,
                request_hash=data.request_hash,
            )
            if new_person:
                _send_set_password_link(membership.user, organization)
    except IntegrityError:  # the same external id, made meanwhile by another request
        known = _known(integration_pk, data.external_id)
        if known is None:
            raise
        return _same_or_conflict(known, data)
    return organization, True


def _send_set_password_link(user: User, organization: Organization) -> None:
    link = owner_link_create(user=user, organization=organization, purpose=LinkPurpose.SET_PASSWORD)
    body = (
        f"An account for {organization.name} was made for you.\n\n"
        f"Set your password within 24 hours (the link works once):\n{link.url}\n"
    )
    transaction.on_commit(
        lambda: send_mail("Set your password", body, None, [user.email], fail_silently=True)
    )


def customer_update(
    *, integration_pk: int, organization: Organization, changes: dict[str, Any]
) -> Organization:
    """Only what is given changes: `name`, `external_id`, `owner_name`. A customer made
    outside this API is taken into the calling integration by its first external id."""
    try:
        with transaction.atomic():
            if "name" in changes:
                organization.name = changes["name"]
                organization.save(update_fields=["name"])
            record_changes = {
                k: v for k, v in changes.items() if k in ("external_id", "owner_name")
            }
            if record_changes:
                Customer.objects.update_or_create(
                    organization=organization,
                    defaults=record_changes,
                    create_defaults={"integration_id": integration_pk, **record_changes},
                )
    except IntegrityError:
        raise ExternalIdConflict("customer", organization.id) from None
    return organization


def customer_delete(*, organization: Organization) -> None:
    with transaction.atomic():
        Organization.objects.select_for_update().filter(id=organization.id).first()
        # Servers still being deleted count: their rows go when their nodes have removed them.
        if Server.objects.filter(organization_id=organization.id).exists():
            raise CustomerHasServers()
        organization.delete()
