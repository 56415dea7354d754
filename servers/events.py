"""Publishing the events of a server, through the webhooks app's one publish function.

Called inside the transaction of the change that caused the event: the delivery rows are
written in that transaction and their attempts queued when it commits.
"""

from datetime import datetime
from typing import Any

from django.utils import timezone

from servers.models import Server
from webhooks import services as webhooks
from webhooks.events import Event


def publish(
    server: Server, event: Event, data: dict[str, Any], occurred_at: datetime | None = None
) -> None:
    webhooks.publish_event(
        organization_id=server.organization_id,
        server_id=server.id,
        server_name=server.name,
        event=event,
        data=data,
        occurred_at=occurred_at or timezone.now(),
    )
