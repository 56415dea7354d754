"""Audit rows of a person's own account actions (second factors, sessions, password).

Audit rows belong to an organization; an account action concerns the person in every
organization they belong to, so each of those organizations gets the row. A person in no
organization (staff) has it in the admin's history of their own user instead (Django's
LogEntry, beside the admin's edits).
"""

from dataclasses import replace

from django.contrib.admin.models import CHANGE, LogEntry

from accounts.models import Membership, User
from audit.services import PanelAction, PanelContext, audit_panel_action


def audit_person_action(
    *, user: User, context: PanelContext, action: PanelAction, status_code: int = 200
) -> None:
    context = replace(context, user_email=context.user_email or user.email)  # staff, or them
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
    if not organization_ids:
        actor = User.objects.filter(email__iexact=context.user_email).first() or user
        LogEntry.objects.log_actions(
            user_id=actor.pk,
            queryset=[user],
            action_flag=CHANGE,
            change_message=f"{action.value} ({action.label}), status {status_code}, "
            f"from {context.ip or 'an unknown address'}",
            single_object=True,
        )
