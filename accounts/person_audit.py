"""Audit rows of a person's own account actions (second factors, sessions, password).

Audit rows belong to an organization; an account action concerns the person in every
organization they belong to, so each of those organizations gets the row.
"""

from dataclasses import replace

from accounts.models import Membership, User
from audit.services import PanelAction, PanelContext, audit_panel_action


def audit_person_action(
    *, user: User, context: PanelContext, action: PanelAction, status_code: int = 200
) -> None:
    context = replace(context, user_email=user.email)
    organization_ids = Membership.objects.filter(user=user).values_list(
        "organization_id", flat=True
    )
    for organization_id in organization_ids:
        audit_panel_action(
            organization_id=organization_id,
            context=context,
            action=action,
            status_code=status_code,
        )
