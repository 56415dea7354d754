"""A person's password, changed by any path (Account -> Security, a set-password link, the
admin, `addmember`): the change is audited, and every other session of the person ends, with
their console sockets and SFTP sessions (`person_sessions_end`)."""

from django.db import transaction

from accounts.models import User
from accounts.panel_sessions import EndReason, person_sessions_end
from accounts.person_audit import audit_person_action
from audit.services import PanelAction, PanelContext


def password_set(
    *, user: User, password: str, context: PanelContext, keep_session_key: str | None = None
) -> None:
    with transaction.atomic():
        user.set_password(password)
        user.save(update_fields=["password"])
        password_changed(user=user, context=context, keep_session_key=keep_session_key)


def password_changed(
    *, user: User, context: PanelContext, keep_session_key: str | None = None
) -> None:
    """What follows a new password, for a path that saved it itself (Django admin's form)."""
    audit_person_action(user=user, context=context, action=PanelAction.PASSWORD_CHANGE)
    person_sessions_end(
        user=user,
        reason=EndReason.PASSWORD_CHANGED,
        context=context,
        keep_session_key=keep_session_key,
    )
