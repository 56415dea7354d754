"""A burst of events for a cluster's workers: `python -m cluster.burst SERVER_ID COUNT` with the
cluster's settings in the environment publishes COUNT `server.crashed` events of the server,
each in a transaction of its own as a real crash report would, and prints their delivery ids
(one JSON list)."""

from __future__ import annotations

import json
import sys


def main() -> int:
    server_id, count = sys.argv[1], int(sys.argv[2])
    import django

    django.setup()
    from django.db import transaction

    from servers.models import Server
    from webhooks.events import Event
    from webhooks.services import publish_event

    server = Server.objects.get(id=server_id)
    ids: list[str] = []
    for number in range(count):
        with transaction.atomic():
            deliveries = publish_event(
                organization_id=server.organization_id,
                server_id=server.id,
                server_name=server.name,
                event=Event.SERVER_CRASHED,
                data={"exit_code": 137, "burst": number},
            )
        ids.extend(delivery.id for delivery in deliveries)
    json.dump(ids, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
