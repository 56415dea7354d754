"""Minting and revoking integration keys (staff only: Django admin and
`manage.py createintegrationkey`). The full key is returned once and never stored."""

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from accounts.authentication import hash_key_secret
from accounts.keys import new_key_id
from accounts.models import User
from application.authentication import new_integration_key_string, parse_integration_key
from application.models import IntegrationKey
from application.scopes import CATALOGUE
from gshost.errors import InvalidInput

MAX_ID_DRAWS = 10


@dataclass(frozen=True)
class NewIntegrationKey:
    key: IntegrationKey
    full_key: str = field(repr=False)  # shown once, never stored, never in a repr


def clean_scopes(scopes: Iterable[str]) -> list[str]:
    cleaned = sorted({scope.strip() for scope in scopes if scope.strip()})
    unknown = [scope for scope in cleaned if scope not in CATALOGUE]
    if unknown:
        known = ", ".join(sorted(CATALOGUE))
        raise InvalidInput(f"Unknown scopes: {', '.join(unknown)} (known: {known}).")
    return cleaned


def clean_networks(allowed_ips: Iterable[str]) -> list[str]:
    networks = []
    for text in (ip.strip() for ip in allowed_ips):
        if not text:
            continue
        try:
            networks.append(str(ipaddress.ip_network(text, strict=False)))
        except ValueError:
            raise InvalidInput(f"Not an IP address or CIDR network: {text!r}.") from None
    return networks


def integration_key_create(
    *,
    name: str,
    scopes: Iterable[str],
    allowed_ips: Iterable[str] = (),
    created_by: User | None = None,
) -> NewIntegrationKey:
    name = name.strip()
    if not name or len(name) > IntegrationKey._meta.get_field("name").max_length:  # type: ignore[operator]
        raise InvalidInput("A key needs a name of 1 to 100 characters.")
    fields = {
        "name": name,
        "scopes": clean_scopes(scopes),
        "allowed_ips": clean_networks(allowed_ips),
        "created_by": created_by,
    }
    for _ in range(MAX_ID_DRAWS):
        key_id = new_key_id()
        if not IntegrationKey.objects.filter(key_id=key_id).exists():
            break
    full_key = new_integration_key_string(key_id)
    parsed = parse_integration_key(full_key)
    assert parsed is not None
    with transaction.atomic():
        key = IntegrationKey.objects.create(
            key_id=key_id, secret_hash=hash_key_secret(parsed.secret), **fields
        )
    return NewIntegrationKey(key=key, full_key=full_key)


def integration_key_revoke(*, key: IntegrationKey) -> IntegrationKey:
    """Permanent; every process refuses the key from its next call (it is read every call)."""
    IntegrationKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    key.refresh_from_db(fields=["revoked_at"])
    return key
