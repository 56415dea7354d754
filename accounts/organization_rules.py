"""An organization's rules for its members' sign-in: whether a second factor is required."""

from django.db import transaction

from accounts.models import Membership, Organization, User
from audit.services import PanelAction, PanelContext, audit_panel_action


def organization_second_factor_set(
    *, organization: Organization, required: bool, context: PanelContext
) -> None:
    with transaction.atomic():
        Organization.objects.filter(id=organization.id).update(require_second_factor=required)
        organization.require_second_factor = required
        audit_panel_action(
            organization_id=organization.id,
            context=context,
            action=PanelAction.ORGANIZATION_SECOND_FACTOR,
        )


def second_factor_required_of(user: User) -> bool:
    """Whether any organization the person belongs to requires a second factor."""
    return Membership.objects.filter(user=user, organization__require_second_factor=True).exists()
