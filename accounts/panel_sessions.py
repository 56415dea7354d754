"""A person's panel sessions, and the one place that ends them.

Every sign-in writes a `PanelSession` row beside the session Django keeps in its session store;
Account -> Sessions lists the rows. Ending sessions always goes through `person_sessions_end`:
it deletes the sessions from the store (the browser holding one is signed out on its next
request), deletes their rows, audits each, and after commit calls every hook registered with
`on_sessions_ended`. A credential change (a password, a factor removed) also withdraws the
person's access on the nodes (`gshost.withdrawals`), which ends their console sockets and SFTP
sessions.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from importlib import import_module

from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.db import transaction
from django.db.models import QuerySet
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone

from accounts.models import PanelSession, User
from accounts.person_audit import audit_person_action
from audit.services import PanelAction, PanelContext
from gshost.api.client_ip import client_ip
from gshost.withdrawals import withdraw_access

logger = logging.getLogger(__name__)

# How stale a row's "last seen" may get before a request refreshes it (one write a minute).
LAST_SEEN_EVERY = timedelta(seconds=60)
SEEN_AT_KEY = "panel_seen_at"


class EndReason(StrEnum):
    SIGNED_OUT_BY_PERSON = "ended by the person"
    OTHERS_ENDED_BY_PERSON = "others ended by the person"
    PASSWORD_CHANGED = "password changed"
    FACTOR_REMOVED = "second factor removed"


@dataclass(frozen=True)
class SessionsEnded:
    """What a hook is told: whose sessions ended, why, and which panel session (if any) was
    kept. A credential change (password, factor removed) ends everything but the kept one."""

    user_id: int
    reason: EndReason
    ended_session_keys: tuple[str, ...]
    kept_session_key: str | None

    @property
    def credentials_changed(self) -> bool:
        return self.reason in {EndReason.PASSWORD_CHANGED, EndReason.FACTOR_REMOVED}


SessionsEndedHook = Callable[[SessionsEnded], None]
# Registered once at start-up (an app's `ready()`); never cleared while the process runs.
_hooks: list[SessionsEndedHook] = []


def on_sessions_ended(hook: SessionsEndedHook) -> SessionsEndedHook:
    """Register `hook` to run after a person's sessions are ended (usable as a decorator)."""
    if hook not in _hooks:
        _hooks.append(hook)
    return hook


def _session_store(session_key: str) -> object:
    engine = import_module(settings.SESSION_ENGINE)
    return engine.SessionStore(session_key)


def panel_session_list(user_id: int) -> QuerySet[PanelSession]:
    """The person's sessions that have not expired, newest sign-in first."""
    rows = PanelSession.objects.filter(user_id=user_id, expires_at__gt=timezone.now())
    return rows.order_by("-signed_in_at", "-id")


def panel_session_record(request: HttpRequest, user: User) -> None:
    """Describe the session `request` was just signed in with."""
    session = request.session
    if not session.session_key:
        session.save()
    PanelSession.objects.filter(user=user, expires_at__lte=timezone.now()).delete()
    PanelSession.objects.update_or_create(
        session_key=session.session_key,
        defaults={
            "user": user,
            "user_agent": request.META.get("HTTP_USER_AGENT", "")[:500],
            "ip": client_ip(request),
            "signed_in_at": timezone.now(),
            "last_seen_at": timezone.now(),
            "expires_at": session.get_expiry_date(),
        },
    )
    session[SEEN_AT_KEY] = timezone.now().timestamp()


def panel_session_seen(request: HttpRequest) -> None:
    """Refresh the row's "last seen" at most once a minute (kept in the session to know)."""
    session = request.session
    now = timezone.now()
    seen_at = session.get(SEEN_AT_KEY, 0.0)
    if not session.session_key or now.timestamp() - seen_at < LAST_SEEN_EVERY.total_seconds():
        return
    session[SEEN_AT_KEY] = now.timestamp()
    PanelSession.objects.filter(session_key=session.session_key).update(
        last_seen_at=now, expires_at=session.get_expiry_date()
    )


def panel_session_rekey(old_key: str | None, new_key: str | None) -> None:
    """The same session under a new key (Django cycles it on a password change)."""
    if old_key and new_key and old_key != new_key:
        PanelSession.objects.filter(session_key=old_key).update(session_key=new_key)


@receiver(user_logged_in, dispatch_uid="accounts.panel_session_record")
def _signed_in(sender: object, request: HttpRequest | None, user: User, **kwargs: object) -> None:
    if request is not None and hasattr(request, "session"):
        panel_session_record(request, user)


@receiver(user_logged_out, dispatch_uid="accounts.panel_session_forget")
def _signed_out(
    sender: object, request: HttpRequest | None, user: User | None = None, **kwargs: object
) -> None:
    """A session the person signed out of ends as one ended from Account -> Sessions does:
    its row goes, and the audit has it."""
    key = request.session.session_key if request is not None else None
    if key and request is not None:
        deleted, _ = PanelSession.objects.filter(session_key=key).delete()
        if deleted and user is not None:
            context = PanelContext.from_request(request)
            audit_person_action(user=user, context=context, action=PanelAction.SESSION_END)


def person_sessions_end(
    *,
    user: User,
    reason: EndReason,
    context: PanelContext,
    keep_session_key: str | None = None,
    only_session_id: int | None = None,
) -> int:
    """End the person's panel sessions: one (`only_session_id`), or all but `keep_session_key`.

    Returns how many panel sessions ended. The hooks run after commit, and for a credential
    change even when no panel session was left to end (a console socket may still be open).
    """
    context = replace(context, user_email=context.user_email or user.email)
    with transaction.atomic():
        rows = PanelSession.objects.select_for_update().filter(user=user)
        if only_session_id is not None:
            rows = rows.filter(id=only_session_id)
        if keep_session_key:
            rows = rows.exclude(session_key=keep_session_key)
        ended = tuple(rows.values_list("session_key", flat=True))
        for session_key in ended:
            _session_store(session_key).delete()  # type: ignore[attr-defined]
            audit_person_action(user=user, context=context, action=PanelAction.SESSION_END)
        PanelSession.objects.filter(session_key__in=ended).delete()
        news = SessionsEnded(user.pk, reason, ended, keep_session_key)
        if news.credentials_changed:
            withdraw_access(reason=str(reason), person_ids=[user.pk])
        if ended or news.credentials_changed:
            transaction.on_commit(lambda: _tell_hooks(news))
    return len(ended)


def _tell_hooks(news: SessionsEnded) -> None:
    """A failing hook is logged and does not keep the others from running."""
    for hook in list(_hooks):
        try:
            hook(news)
        except Exception:
            logger.exception("A sessions-ended hook failed: %r", hook)
