"""Leaked keys: a token found in public is revoked at once if it is one of our active keys.

News comes from GitHub's secret scanning (`accounts.integrations`) or from anyone who found a
key (`POST /api/public/v1/keys/report-leaked`). Either way each token goes through
`leaked_token_handle`: the key id and checksum are read offline, then the secret is checked
against the stored hash, so a token merely shaped like one of our keys (a valid checksum on a
known key id is easy to forge) revokes nothing. A key that is revoked here goes through the
same revocation as every other (`accounts.services`), with a `key.leak_revoked` audit row,
and the organization's owners get an email.

No token is ever logged or kept: log lines name the key id, which is not a secret.
"""

import hashlib
import hmac
import logging
import unicodedata
from enum import StrEnum

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest
from django.urls import reverse
from django.views.decorators.debug import sensitive_variables

from accounts import keys
from accounts.authentication import hash_key_secret
from accounts.models import ApiKey, LeakSource
from accounts.services import api_key_revoke_leaked, email_owners
from audit.actors import Actor
from audit.services import SystemContext

logger = logging.getLogger(__name__)

MAX_URL_LENGTH = 2000


class LeakLabel(StrEnum):
    """GitHub's verdict labels: one of our keys (in any state), or not."""

    TRUE_POSITIVE = "true_positive"
    FALSE_POSITIVE = "false_positive"


def token_hash(token: str) -> str:
    """What an answer may say about a token: its SHA-256, never the token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def plain_text(text: str, limit: int = MAX_URL_LENGTH) -> str:
    """Text from outside (a URL where a key was found, a key's name), safe to store and to
    quote in an email: control and format characters (bidirectional overrides, zero-width
    characters, NUL) removed, at most `limit` characters."""
    kept = (c for c in text if unicodedata.category(c) not in {"Cc", "Cf", "Cs"})
    return "".join(kept)[:limit]


def leak_context(request: HttpRequest, url: str) -> SystemContext:
    """The audit context of a leak learnt from `request`, naming where it was found."""
    return SystemContext.from_request(request, url=plain_text(url))


@sensitive_variables("token", "parsed")
def leaked_token_handle(*, token: str, source: LeakSource, context: SystemContext) -> LeakLabel:
    """Revoke the key `token` is, if it is an active one of ours, and tell its owners.

    true_positive for any of our keys (active, expired or revoked); only an active key (one in
    its rotation grace period included) changes.
    """
    parsed = keys.parse_key(token)
    if parsed is None:  # malformed or a bad checksum: not ours, no database read
        return LeakLabel.FALSE_POSITIVE
    key = ApiKey.objects.select_related("organization").filter(key_id=parsed.key_id).first()
    if key is None or not hmac.compare_digest(hash_key_secret(parsed.secret), key.secret_hash):
        return LeakLabel.FALSE_POSITIVE
    actor = Actor.system_on_report(f"leak report ({source.label})", context)
    if api_key_revoke_leaked(key=key, source=source, url=context.url, actor=actor):
        logger.warning(
            "Revoked leaked API key %s of organization %s (reported through %s)",
            key.key_id,
            key.organization_id,
            source.label,
        )
        transaction.on_commit(lambda: leak_notice_send(key, source=source, url=context.url))
    return LeakLabel.TRUE_POSITIVE


def leak_notice_message(key: ApiKey, *, source: LeakSource, url: str) -> tuple[str, str]:
    """The owners' email: which key, where it was found, that it is revoked, what to do."""
    name = plain_text(key.name, 100)
    base = settings.PUBLIC_BASE_URL.rstrip("/")
    subject = f"[gshost] API key {name} ({key.key_id}) was found in public and revoked"
    lines = [
        f'Your API key "{name}" (id {key.key_id}) of {plain_text(key.organization.name, 200)} '
        "was found in public, so we have revoked it.",
        "It no longer works: every request made with it is refused with 401 token_revoked,",
        "everywhere within a minute. Revocation is permanent.",
        "",
        f"Key: {name} (id {key.key_id})",
        f"Reported through: {source.label}",
        "Where it was found, as the report gave it (not checked by us):",
        f"    {url or '(not given)'}",
        "",
        "What to do now:",
        f"1. Create a new key for whatever used this one: {base}{reverse('panel:key_create')}",
        "2. Remove the key from where it was found (and from that place's history).",
        f"3. Look for calls made with it: {base}{reverse('audit_panel:list')}?key_id={key.key_id}",
    ]
    return subject[:200], "\n".join(lines)


def leak_notice_send(key: ApiKey, *, source: LeakSource, url: str) -> bool:
    """Email the organization's owners. Never raises: the revocation is what matters."""
    subject, body = leak_notice_message(key, source=source, url=url)
    return email_owners(key.organization_id, subject, body)
