"""Who asked for an action: an API key, a person in the panel, or the platform itself."""

from dataclasses import dataclass
from enum import StrEnum

from accounts.key_records import KeyRecord
from audit.services import PanelAction, PanelContext, audit_panel_action


class Source(StrEnum):
    API = "api"
    PANEL = "panel"
    SYSTEM = "system"


@dataclass(frozen=True)
class Actor:
    source: Source
    key_id: str | None = None
    user_email: str | None = None
    panel: PanelContext | None = None
    label: str = ""

    @classmethod
    def api(cls, key: KeyRecord) -> "Actor":
        return cls(Source.API, key_id=key.key_id)

    @classmethod
    def person(cls, context: PanelContext) -> "Actor":
        return cls(Source.PANEL, user_email=context.user_email, panel=context)

    @classmethod
    def system(cls, label: str) -> "Actor":
        return cls(Source.SYSTEM, label=label)

    def describe(self) -> str:
        if self.source == Source.API:
            return f"api key {self.key_id}"
        if self.source == Source.PANEL:
            return f"panel {self.user_email}"
        return self.label or "system"

    def audit(self, *, organization_id: str, action: PanelAction, server_id: str) -> None:
        """Panel actions are audited here, inside the acting service's transaction. API calls
        are audited by the request middleware, and the platform's own moves are not calls."""
        if self.panel is not None:
            audit_panel_action(
                organization_id=organization_id,
                context=self.panel,
                action=action,
                server_id=server_id,
            )
