"""Test and benchmark data in a cluster's database: `python -m cluster.seed` with the cluster's
settings in the environment (Cluster.command_env()) prints what it made as one JSON object.

    --organization SLUG   a new organization (its owner is owner@SLUG.test)
    --keys N              API keys with every scope, never expiring
    --servers N           servers on the simulated node (stopped)
    --webhook-url URL     a webhook subscribed to every event (its secret is printed)
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from typing import Any


def seed(*, organization: str, keys: int, servers: int, webhook_url: str) -> dict[str, Any]:
    from accounts.scopes import Scope
    from accounts.services import api_key_create, member_add, organization_create
    from audit.actors import Actor
    from servers.models import Server
    from servers.services import server_create
    from webhooks.events import Event
    from webhooks.services import webhook_create

    actor = Actor.system("cluster.seed")
    org = organization_create(slug=organization, name=organization)
    owner = member_add(
        organization=org,
        email=f"owner@{organization}.test",
        password=secrets.token_urlsafe(16),
        owner=True,
    )
    made: dict[str, Any] = {"organization_id": org.id, "organization": organization}
    made["keys"] = [
        api_key_create(
            membership=owner,
            name=f"key-{number}",
            scopes=[scope.value for scope in Scope],
            expiry_days=None,
            actor=actor,
        ).full_key
        for number in range(keys)
    ]
    if servers:
        first = server_create(actor=actor, organization=org, name="server-0")
        Server.objects.bulk_create(
            Server(organization=org, name=f"server-{n}", game=first.game, node=first.node)
            for n in range(1, servers)
        )
        made["servers"] = list(
            Server.objects.filter(organization=org).order_by("name").values_list("id", flat=True)
        )
    if webhook_url:
        webhook, secret = webhook_create(
            organization=org, url=webhook_url, events=[e.value for e in Event], actor=actor
        )
        made["webhook"] = {"id": webhook.id, "secret": secret}
    return made


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.seed")
    parser.add_argument("--organization", required=True)
    parser.add_argument("--keys", type=int, default=1)
    parser.add_argument("--servers", type=int, default=0)
    parser.add_argument("--webhook-url", default="")
    options = parser.parse_args()

    import django

    django.setup()
    made = seed(
        organization=options.organization,
        keys=options.keys,
        servers=options.servers,
        webhook_url=options.webhook_url,
    )
    json.dump(made, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
