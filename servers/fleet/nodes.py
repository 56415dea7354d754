"""Nodes: registering one, its token (shown once, kept encrypted and hashed), its ports, and
which node a new server goes on. The protocol with the agent is docs/agent-protocol.md."""

import hashlib
import hmac
import ipaddress
import logging
import re
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.contrib.admin.models import CHANGE, LogEntry
from django.db import transaction

from accounts.models import User
from audit.actors import Actor
from gshost.encryption import decrypt_secret, encrypt_secret
from gshost.ids import random_base62
from servers.errors import InvalidNodeInput, NodeFull, NodeUnavailable, SimulatedNodeHasNoToken
from servers.models import (
    DEFAULT_FIRST_PORT,
    DEFAULT_LAST_PORT,
    SIMULATED_NODE_NAME,
    Node,
    NodeKind,
    NodeState,
    Server,
)
from servers.runtime import host_traits

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "gsn_"
TOKEN_RANDOM_LENGTH = 43
_TOKEN = re.compile(r"gsn_[0-9A-Za-z]{43}")
_NODE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,49}")
LOWEST_PORT = 1024


def new_node_token() -> str:
    return TOKEN_PREFIX + random_base62(TOKEN_RANDOM_LENGTH)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def node_token(node: Node) -> str | None:
    """The token to call the node's agent with; None when it cannot be decrypted."""
    return decrypt_secret(node.encrypted_token) if node.encrypted_token else None


def simulated_node() -> Node:
    """The built-in node (a data migration makes it; a flushed test database makes it again)."""
    node, _ = Node.objects.get_or_create(
        name=SIMULATED_NODE_NAME, defaults={"kind": NodeKind.SIMULATED}
    )
    return node


# Registering


@dataclass(frozen=True)
class NodeInput:
    name: str
    url: str
    address: str
    ports: str = f"{DEFAULT_FIRST_PORT}-{DEFAULT_LAST_PORT}"
    ca_pem: str = ""
    # Capacity: None takes what the agent reports of its machine at its first heartbeat.
    memory_mb: int | None = None
    disk_mb: int | None = None
    cpu_percent: int | None = None
    overallocate_percent: int = 0
    tags: str = ""  # "eu,ssd"


def clean_node_name(name: str) -> str:
    name = name.strip()
    if not _NODE_NAME.fullmatch(name):
        raise InvalidNodeInput(
            "A node name is 1-50 lowercase letters, digits and dashes, starting with a "
            "letter or digit."
        )
    if name == SIMULATED_NODE_NAME:
        raise InvalidNodeInput(f"{SIMULATED_NODE_NAME!r} is the built-in simulated node's name.")
    return name


def clean_url(url: str) -> str:
    """`https://HOST[:PORT]`, nothing after the authority: the agent's base URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise InvalidNodeInput("The URL is not valid: use https://HOST:PORT.") from None
    if parts.scheme != "https":
        raise InvalidNodeInput("The agent speaks HTTPS only: the URL must start with https://.")
    if not parts.hostname:
        raise InvalidNodeInput("The URL has no host: use https://HOST:PORT.")
    if parts.username or parts.password or parts.path not in ("", "/"):
        raise InvalidNodeInput("The URL is https://HOST:PORT, without a user, path or query.")
    if parts.query or parts.fragment:
        raise InvalidNodeInput("The URL is https://HOST:PORT, without a user, path or query.")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"https://{host}" + (f":{port}" if port is not None else "")


def clean_address(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address.strip()))
    except ValueError:
        raise InvalidNodeInput(
            f"{address!r} is not an IP address (the node's public IP)."
        ) from None


def clean_ports(ports: str) -> tuple[int, int]:
    first, sep, last = ports.strip().partition("-")
    if not sep or not first.isdigit() or not last.isdigit():
        raise InvalidNodeInput("Ports are a range FIRST-LAST, like 27000-27099.")
    low, high = int(first), int(last)
    if not LOWEST_PORT <= low <= high <= 65535:
        raise InvalidNodeInput(
            f"Ports are from {LOWEST_PORT} to 65535, the first not above the last."
        )
    return low, high


def clean_ca_pem(pem: str) -> str:
    """One or more PEM certificates (the CA that signed the agent's certificate)."""
    if not pem.strip():
        return ""
    if "-----BEGIN CERTIFICATE-----" not in pem:
        raise InvalidNodeInput("The CA file holds no PEM certificate.")
    try:
        ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError):
        raise InvalidNodeInput("The CA file is not a valid PEM certificate.") from None
    return pem.strip() + "\n"


_TAG = re.compile(r"[a-z0-9][a-z0-9_-]{0,29}")
MAX_TAGS = 20
MAX_CAPACITY = 2**31 - 1
MAX_OVERALLOCATE_PERCENT = 1000


def clean_tags(tags: str) -> list[str]:
    """`a,b` as a sorted list of distinct tags (lowercase letters, digits, - and _)."""
    found = sorted({tag.strip().lower() for tag in tags.split(",") if tag.strip()})
    bad = [tag for tag in found if not _TAG.fullmatch(tag)]
    if bad or len(found) > MAX_TAGS:
        raise InvalidNodeInput(
            f"Tags are at most {MAX_TAGS} words of lowercase letters, digits, - and _, "
            "separated by commas."
        )
    return found


def clean_capacity(name: str, value: int | None, *, high: int = MAX_CAPACITY) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise InvalidNodeInput(f"{name} must be a whole number from 0 to {high}.")
    return value


@dataclass(frozen=True)
class NewNode:
    node: Node
    token: str  # shown once, never stored in clear


PLATFORM = Actor.system("the platform")


def node_trail(node: Node, actor: Actor, message: str) -> None:
    """What was done to a node, and by whom: in the log always, and for staff (a person) in
    the admin's history of the node as well (Django's LogEntry, like the admin's own edits)."""
    logger.info("Node %s: %s by %s", node.name, message, actor.describe())
    if not actor.user_email:
        return
    user = User.objects.filter(email__iexact=actor.user_email).first()
    if user is not None:
        LogEntry.objects.log_actions(
            user_id=user.pk,
            queryset=[node],
            action_flag=CHANGE,
            change_message=message,
            single_object=True,
        )


def node_create(*, data: NodeInput, actor: Actor = PLATFORM) -> NewNode:
    """A new agent node; its token is returned once."""
    name = clean_node_name(data.name)
    url = clean_url(data.url)
    address = clean_address(data.address)
    first_port, last_port = clean_ports(data.ports)
    ca_pem = clean_ca_pem(data.ca_pem)
    capacity = {
        "memory_mb": clean_capacity("--memory", data.memory_mb),
        "disk_mb": clean_capacity("--disk", data.disk_mb),
        "cpu_percent": clean_capacity("--cpu", data.cpu_percent),
    }
    overallocate = clean_capacity(
        "--overallocate", data.overallocate_percent, high=MAX_OVERALLOCATE_PERCENT
    )
    tags = clean_tags(data.tags)
    token = new_node_token()
    with transaction.atomic():
        if Node.objects.filter(name=name).exists():
            raise InvalidNodeInput(f"There is already a node named {name!r}.")
        node = Node.objects.create(
            name=name,
            kind=NodeKind.AGENT,
            url=url,
            address=address,
            first_port=first_port,
            last_port=last_port,
            ca_pem=ca_pem,
            encrypted_token=encrypt_secret(token),
            token_hash=token_hash(token),
            overallocate_percent=overallocate or 0,
            tags=tags,
            **capacity,
        )
    node_trail(node, actor, f"registered at {node.url}")
    return NewNode(node, token)


def node_rotate_token(*, node: Node, actor: Actor = PLATFORM) -> str:
    """A new token for an agent node; the old one stops working at once."""
    if not host_traits(node).has_token:
        raise SimulatedNodeHasNoToken()
    token = new_node_token()
    Node.objects.filter(id=node.id).update(
        encrypted_token=encrypt_secret(token), token_hash=token_hash(token)
    )
    node.encrypted_token, node.token_hash = encrypt_secret(token), token_hash(token)
    node_trail(node, actor, "token rotated")
    return token


def node_require_reachable(server: Server) -> None:
    """NodeUnavailable (503) when the server's node has sent no heartbeat for 30 s: asked
    before anything is recorded, so nothing is, and nothing is queued. Its last heartbeat is
    read now (the server may have been loaded long before, with its node)."""
    node = Node.objects.only("id", "name", "kind", "last_heartbeat_at").get(id=server.node_id)
    if node.state() != NodeState.ONLINE:
        raise NodeUnavailable(node.name, "no heartbeat for 30 s")


def node_set_drained(*, node: Node, drained: bool, actor: Actor) -> Node:
    """Drained, no new server is placed on the node; its servers keep running."""
    Node.objects.filter(id=node.id).update(drained=drained)
    node.drained = drained
    node_trail(node, actor, "drained" if drained else "undrained")
    return node


def node_by_token(token: str) -> Node | None:
    """The agent node whose token this is, compared in constant time; None otherwise."""
    if not _TOKEN.fullmatch(token):
        return None
    digest = token_hash(token)
    node = Node.objects.filter(token_hash=digest, kind=NodeKind.AGENT).first()
    if node is None or not hmac.compare_digest(node.token_hash or "", digest):
        return None
    return node


# Ports


def allocate_port(node: Node) -> int:
    """The lowest free port of the node's range. Call inside a transaction: the node row is
    locked until it commits, so two creations never take the same port."""
    Node.objects.select_for_update().filter(id=node.id).first()
    used = set(Server.objects.filter(node=node, port__isnull=False).values_list("port", flat=True))
    for port in range(node.first_port, node.last_port + 1):
        if port not in used:
            return port
    raise NodeFull(node.name, node.first_port, node.last_port)


def free_port_count(node: Node) -> int | None:
    """Ports of the range not taken; None for the simulated node (it needs none)."""
    if not host_traits(node).forwards_ports:
        return None
    used = Server.objects.filter(node=node, port__isnull=False).count()
    return max(0, node.port_count - used)
