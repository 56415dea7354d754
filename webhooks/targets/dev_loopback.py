"""Development only: let the webhook sender reach the demo's local receiver.

Webhook URLs must name a public-looking host, and the sender resolves that name at send time.
The demo receiver listens on 127.0.0.1 under a name of the reserved `.example` domain, which
no DNS answers. Only when ``DEBUG`` is on and ``DEV_WEBHOOK_LOOPBACK_HOSTS`` names hosts
(``make run`` does both), ``client.configured_sender_factory`` builds senders with this: they
resolve exactly those names to 127.0.0.1; every other name goes to DNS as usual. The send-time
address check still applies: 127.0.0.1 passes only because ``make run`` also puts it in
``WEBHOOK_ALLOWED_NETWORKS``.
"""

import ipaddress
from functools import partial

from webhooks.targets import client
from webhooks.targets.transport import IPAddress, Resolver, resolve_host

LOOPBACK = ipaddress.IPv4Address("127.0.0.1")


def loopback_for(names: frozenset[str]) -> Resolver:
    def resolve(host: str, port: int) -> list[IPAddress]:
        return [LOOPBACK] if host.lower().rstrip(".") in names else resolve_host(host, port)

    return resolve


def loopback_sender_factory(names: frozenset[str]) -> client.SenderFactory:
    """Senders that resolve ``names`` to 127.0.0.1."""
    return partial(client.build_sender, resolve=loopback_for(names))
