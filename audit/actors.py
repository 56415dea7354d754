"""Who acted: an API key, an integration key, a person in the panel, or the platform itself.

Every service that changes something takes an `Actor` and audits through it, so an API call
is said to be one (`Actor.api`) rather than implied by a missing panel context: the request
middleware records API calls, `Actor.audit` records panel actions inside the service's
transaction, and the platform's own moves (`Actor.system`) are nobody's call. A move made on
news from outside (`Actor.system_on_report`: a leaked key revoked) is recorded as `system`.
"""

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from audit.services import (
    PanelAction,
    PanelContext,
    SocketContext,
    SystemContext,
    audit_panel_action,
    audit_socket_action,
    audit_system_action,
)


class ActorSource(StrEnum):
    API = "api"
    PANEL = "panel"
    SYSTEM = "system"
    INTEGRATION = "integration"
    WEBSOCKET = "websocket"  # a key or a person typing into a node's console websocket


class _CallingKey(Protocol):
    @property
    def key_id(self) -> str: ...


@dataclass(frozen=True)
class Actor:
    source: ActorSource
    key_id: str | None = None
    user_email: str | None = None
    panel: PanelContext | None = None
    label: str = ""
    reported: SystemContext | None = None
    socket: SocketContext | None = None

    @classmethod
    def api(cls, key: _CallingKey) -> "Actor":
        return cls(ActorSource.API, key_id=key.key_id)

    @classmethod
    def integration(cls, key: _CallingKey) -> "Actor":
        """A billing system through the Application API: audited like an API call, by the
        Application API's middleware (application.middleware)."""
        return cls(ActorSource.INTEGRATION, key_id=key.key_id)

    @classmethod
    def person(cls, context: PanelContext) -> "Actor":
        return cls(ActorSource.PANEL, user_email=context.user_email, panel=context)

    @classmethod
    def websocket(
        cls, context: SocketContext, *, key_id: str | None = None, user_email: str | None = None
    ) -> "Actor":
        """A key (`key_id`) or a person (`user_email`) acting over a console websocket."""
        return cls(ActorSource.WEBSOCKET, key_id=key_id, user_email=user_email, socket=context)

    @classmethod
    def system(cls, label: str) -> "Actor":
        return cls(ActorSource.SYSTEM, label=label)

    @classmethod
    def system_on_report(cls, label: str, context: SystemContext) -> "Actor":
        """The platform acting on news from outside (a leaked key): audited, unlike `system`."""
        return cls(ActorSource.SYSTEM, label=label, reported=context)

    def describe(self) -> str:
        if self.source == ActorSource.API:
            return f"api key {self.key_id}"
        if self.source == ActorSource.INTEGRATION:
            return f"integration key {self.key_id}"
        if self.source == ActorSource.PANEL:
            return f"panel {self.user_email}"
        if self.source == ActorSource.WEBSOCKET:
            who = f"api key {self.key_id}" if self.key_id else f"panel {self.user_email}"
            return f"{who} over a console socket"
        return self.label or "system"

    def audit(
        self,
        *,
        organization_id: str,
        action: PanelAction,
        server_id: str = "",
        key_id: str = "",
        details: dict[str, Any] | None = None,
    ) -> None:
        """Panel actions are audited here, inside the acting service's transaction. API calls
        are audited by the request middleware. The platform's own moves are not calls, except
        those made on news from outside (a leaked key revoked): their row names the key."""
        if self.reported is not None:
            audit_system_action(
                organization_id=organization_id,
                context=self.reported,
                action=action,
                key_id=key_id,
            )
        elif self.socket is not None:
            audit_socket_action(
                organization_id=organization_id,
                context=self.socket,
                action=action,
                server_id=server_id,
                key_id=self.key_id or "",
                user_email=self.user_email or "",
            )
        elif self.panel is not None:
            audit_panel_action(
                organization_id=organization_id,
                context=self.panel,
                action=action,
                server_id=server_id,
                details=details,
            )
