"""The load test's data, in the cluster's database (run with the cluster's settings): agent
nodes served by the stand-in fleet, organizations with their servers (running, on those nodes),
API keys and a webhook each to the local receiver. Prints it all as one JSON object.

    python bench/load/seed.py AGENTS_URL CA_FILE RECEIVER_URL NODES SERVERS ORGS KEYS
"""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    agents_url, ca_file, receiver_url = sys.argv[1:4]
    nodes, servers, orgs, keys = map(int, sys.argv[4:8])
    import django

    django.setup()
    from accounts.scopes import Scope
    from accounts.services import api_key_create, member_add, organization_create
    from audit.actors import Actor
    from servers.fleet.nodes import NodeInput, node_create
    from servers.models import Server, ServerState
    from webhooks.services import webhook_create

    actor = Actor.system("bench.load")
    ca_pem = Path(ca_file).read_text()
    made_nodes = [
        node_create(
            data=NodeInput(
                name=f"load-{n}", url=agents_url, address=f"198.51.100.{n % 250 + 1}", ca_pem=ca_pem
            )
        )
        for n in range(nodes)
    ]
    per_node = servers // nodes
    slots = [(made.node, made.node.first_port + i) for made in made_nodes for i in range(per_node)]
    organizations = []
    per_org, keys_per_org = servers // orgs, keys // orgs
    for number in range(orgs):
        org = organization_create(slug=f"load-{number}", name=f"Load {number}")
        owner = member_add(
            organization=org,
            email=f"owner@load-{number}.test",
            password=secrets.token_urlsafe(16),
            owner=True,
        )
        mine = slots[number * per_org : (number + 1) * per_org]
        rows = Server.objects.bulk_create(
            Server(
                organization=org,
                name=f"world-{number}-{i}",
                game="demo",
                node=node,
                port=port,
                address=f"{node.address}:{port}",
                state=ServerState.RUNNING,
                restart_on_crash=False,
            )
            for i, (node, port) in enumerate(mine)
        )
        key_values = [
            api_key_create(
                membership=owner,
                name=f"poller-{k}",
                scopes=[scope.value for scope in Scope],
                expiry_days=None,
                actor=actor,
            ).full_key
            for k in range(keys_per_org)
        ]
        webhook_create(
            organization=org,
            url=f"{receiver_url}/{number}",
            events=["server.crashed", "server.started"],
            actor=actor,
        )
        organizations.append({"keys": key_values, "servers": [row.id for row in rows]})
    fleet = [
        {
            "token": made.token,
            "servers": list(
                Server.objects.filter(node=made.node).order_by("port").values_list("id", flat=True)
            ),
        }
        for made in made_nodes
    ]
    json.dump({"organizations": organizations, "nodes": fleet}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
