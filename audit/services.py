"""Audit writes for panel actions and the platform's own actions on keys: called inside the
acting service's transaction."""

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.http import HttpRequest
from django.utils import timezone

from audit.models import ActorType, AuditRecord, Source
from gshost.api.client_ip import client_ip
from gshost.purge import PURGE_BATCH_ROWS, delete_in_batches


class PanelAction(models.TextChoices):
    KEY_CREATE = "key.create", "API key created"
    KEY_ROTATE = "key.rotate", "API key rotated"
    KEY_REVOKE = "key.revoke", "API key revoked"
    KEY_LEAK_REVOKED = "key.leak_revoked", "API key revoked by the platform: found in public"
    WEBHOOK_CREATE = "webhook.create", "Webhook created"
    WEBHOOK_UPDATE = "webhook.update", "Webhook updated"
    WEBHOOK_DELETE = "webhook.delete", "Webhook deleted"
    WEBHOOK_TEST = "webhook.test", "Webhook test ping"
    WEBHOOK_REDELIVER = "webhook.redeliver", "Delivery re-sent"
    WEBHOOK_SECRET_ROLL = "webhook.secret_roll", "Webhook signing secret rolled"
    SERVER_POWER = "server.power", "Server power action"
    SERVER_CONSOLE = "server.console", "Console command"
    SERVER_UPDATE = "server.update", "Server changed"
    MFA_TOTP_ADD = "mfa.totp_add", "Authenticator app added"
    MFA_TOTP_REMOVE = "mfa.totp_remove", "Authenticator app removed"
    MFA_PASSKEY_ADD = "mfa.passkey_add", "Passkey added"
    MFA_PASSKEY_REMOVE = "mfa.passkey_remove", "Passkey removed"
    MFA_RECOVERY_CODES_CREATE = "mfa.recovery_codes_create", "Recovery codes made"
    MFA_RECOVERY_CODE_USE = "mfa.recovery_code_use", "Recovery code used"
    MFA_CODE_FAIL = "mfa.code_fail", "Wrong second-factor code"
    SESSION_END = "session.end", "Panel session ended"
    SESSION_LINK_SIGN_IN = "session.link_sign_in", "Signed in with a login link"
    PASSWORD_CHANGE = "account.password_change", "Password changed"
    SSH_KEY_ADD = "account.ssh_key_add", "SSH key added"
    SSH_KEY_REMOVE = "account.ssh_key_remove", "SSH key removed"
    ORGANIZATION_SECOND_FACTOR = "organization.second_factor", "Second-factor rule changed"
    SERVER_CREATE = "server.create", "Server created"
    BACKUP_DELETE = "backup.delete", "Backup deleted"
    SERVER_SUSPEND = "server.suspend", "Server suspended"
    SERVER_UNSUSPEND = "server.unsuspend", "Server unsuspended"
    SERVER_REINSTALL = "server.reinstall", "Server reinstall asked"
    SERVER_DELETE = "server.delete", "Server deletion asked"
    FILES_WRITE = "files.write", "File written"
    FILES_COPY = "files.copy", "File copied"
    FILES_DIRECTORY = "files.directory", "Folder made"
    FILES_DELETE = "files.delete", "Files deleted"
    FILES_RENAME = "files.rename", "File renamed"
    FILES_COMPRESS = "files.compress", "Files compressed"
    FILES_DECOMPRESS = "files.decompress", "Archive unpacked"
    FILES_PULL = "files.pull", "File pulled from a URL"
    FILES_DOWNLOAD = "files.download", "Download link made"
    FILES_UPLOAD = "files.upload", "Upload link made"


SFTP_LOGIN_ACTION = "files.sftp_login"


@dataclass(frozen=True)
class PanelContext:
    """Who did it and from where: taken from the panel request by the view."""

    user_email: str
    method: str = "POST"
    path: str = ""
    ip: str | None = None
    user_agent: str = ""
    request_id: str = ""

    @classmethod
    def from_request(cls, request: HttpRequest) -> "PanelContext":
        return cls(user_email=getattr(request.user, "email", ""), **_request_fields(request))


def _request_fields(request: HttpRequest) -> dict[str, Any]:
    """What an audit row records of the request that led to the action."""
    return {
        "method": request.method or "POST",
        "path": request.path[:500],
        "ip": client_ip(request),
        "user_agent": request.META.get("HTTP_USER_AGENT", "")[:500],
        "request_id": getattr(request, "request_id", ""),
    }


def note_audit_details(
    request: HttpRequest, details: dict[str, Any], *, action: str | None = None
) -> None:
    """Facts the API call's audit row keeps in its `details` (a file action's paths), and its
    action when it is not the route's name (one route, two methods); the API middleware
    records the row after the view answered (audit.recording)."""
    request.audit_details = details  # type: ignore[attr-defined]
    if action is not None:
        request.audit_action = action  # type: ignore[attr-defined]


def audit_panel_action(
    *,
    organization_id: str,
    context: PanelContext,
    action: PanelAction,
    server_id: str = "",
    status_code: int = 200,
    details: dict[str, Any] | None = None,
) -> AuditRecord:
    return AuditRecord.objects.create(
        details=json.dumps(details, ensure_ascii=False) if details else "",
        organization_id=organization_id,
        source=Source.PANEL,
        actor_type=ActorType.USER,
        actor_email=context.user_email,
        method=context.method,
        path=context.path,
        action=action.value,
        status_code=status_code,
        server_id=server_id,
        ip=context.ip,
        user_agent=context.user_agent,
        request_id=context.request_id,
    )


@dataclass(frozen=True)
class SystemContext:
    """What made the platform act on its own: the request that brought the news (a leak
    alert or report) and the URL it named."""

    url: str = ""
    method: str = "POST"
    path: str = ""
    ip: str | None = None
    user_agent: str = ""
    request_id: str = ""

    @classmethod
    def from_request(cls, request: HttpRequest, *, url: str = "") -> "SystemContext":
        return cls(url=url[:2000], **_request_fields(request))


def audit_system_action(
    *, organization_id: str, context: SystemContext, action: PanelAction, key_id: str
) -> AuditRecord:
    """The platform acting on one of the organization's keys: `key_id` names that key."""
    return AuditRecord.objects.create(
        organization_id=organization_id,
        source=Source.SYSTEM,
        actor_type=ActorType.SYSTEM,
        actor_key_id=key_id,
        method=context.method,
        path=context.path,
        action=action.value,
        ip=context.ip,
        user_agent=context.user_agent,
        request_id=context.request_id,
        url=context.url,
    )


def audit_sftp_login(
    *, organization_id: str, user_email: str, server_id: str, ip: str | None, method: str
) -> AuditRecord:
    """A person signed in to a server's SFTP (from `ip`, the SSH client's address), with
    their `password` or an SSH `key` (`method`, in the row's details)."""
    return audit_sftp_action(
        organization_id=organization_id,
        user_email=user_email,
        server_id=server_id,
        action=SFTP_LOGIN_ACTION,
        details={"path": "/", "with": method},
        ip=ip,
    )


def audit_sftp_action(
    *,
    organization_id: str,
    user_email: str,
    server_id: str,
    action: str,
    details: dict[str, Any],
    ip: str | None = None,
) -> AuditRecord:
    """What a person did over SFTP: a login, or a change to the server's files (as its node
    reported it), with the paths in the row's details as the file API's rows have them."""
    return AuditRecord.objects.create(
        organization_id=organization_id,
        source=Source.SFTP,
        actor_type=ActorType.USER,
        actor_email=user_email,
        action=action,
        status_code=200,
        server_id=server_id,
        ip=ip,
        details=json.dumps(details, ensure_ascii=False),
    )


@dataclass(frozen=True)
class SocketContext:
    """A command typed into a console websocket, as the node holding the socket tells it."""

    path: str
    ip: str | None = None
    user_agent: str = ""


def audit_socket_action(
    *,
    organization_id: str,
    context: SocketContext,
    action: PanelAction,
    server_id: str,
    key_id: str = "",
    user_email: str = "",
) -> AuditRecord:
    """A key's or a person's action over a console websocket (method `WS`): an API row for a
    key, a panel row for a person."""
    return AuditRecord.objects.create(
        organization_id=organization_id,
        source=Source.API if key_id else Source.PANEL,
        actor_type=ActorType.API_KEY if key_id else ActorType.USER,
        actor_key_id=key_id,
        actor_email=user_email,
        method="WS",
        path=context.path[:500],
        action=action.value,
        status_code=202,
        server_id=server_id,
        ip=context.ip,
        user_agent=context.user_agent[:500],
    )


def audit_purge_expired(*, batch_rows: int = PURGE_BATCH_ROWS) -> int:
    """Delete rows older than the 24-hour window, oldest first, a batch per statement (each
    its own transaction, through the occurred_at index); returns how many went."""
    cutoff = timezone.now() - timedelta(hours=settings.AUDIT_RETENTION_HOURS)
    expired = AuditRecord.objects.filter(occurred_at__lt=cutoff).order_by("occurred_at")
    return delete_in_batches(expired, batch_rows=batch_rows)
