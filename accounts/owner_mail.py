"""Email to an organization's owners: failure notices of webhooks, leaked-key notices."""

from __future__ import annotations

import logging

from django.core.mail import send_mail

from accounts.models import Membership, Role

logger = logging.getLogger(__name__)


def owner_emails(organization_id: str) -> list[str]:
    owners = Membership.objects.filter(organization_id=organization_id, role=Role.OWNER)
    return sorted(set(owners.values_list("user__email", flat=True)))


def email_owners(organization_id: str, subject: str, body: str) -> bool:
    """Send one email to the owners. Never raises: False when the mail server refused it, True
    when it was sent or there is nobody to tell."""
    recipients = owner_emails(organization_id)
    if not recipients:
        return True
    try:
        send_mail(subject, body, None, recipients)
    except Exception:
        logger.exception("Could not email the owners of %s", organization_id)
        return False
    return True
