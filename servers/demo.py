"""Schedules and a backup for the demo organization's servers (the `demo` command).

Idempotent: a server that already has schedules or backups is left as it is.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from accounts.models import User
from audit.actors import Actor
from servers.backups.jobs import backup_create, job_finish
from servers.fleet.nodes import (
    NodeInput,
    clean_ca_pem,
    clean_url,
    node_by_token,
    node_create,
    node_rotate_token,
)
from servers.game.capabilities import Capability, is_supported
from servers.models import Node, Server
from servers.runtime import host_traits
from servers.schedules import ScheduleInput, schedule_create

DEMO_SCHEDULES: dict[str, tuple[ScheduleInput, ...]] = {
    "minecraft": (
        ScheduleInput("Autosave", "*/15 * * * *", "save-all", alert_on=("failed",)),
        ScheduleInput("Vote reminder", "0 * * * *", "say Remember to vote for us!"),
    ),
    "demo": (
        ScheduleInput("Autosave", "*/15 * * * *", "save", alert_on=("failed",)),
        ScheduleInput("Welcome", "0 * * * *", "say Welcome to the gshost demo!"),
    ),
    "custom": (
        ScheduleInput(
            "Nightly track reset", "0 4 * * *", "reset-track", alert_on=("failed", "skipped")
        ),
    ),
}
DEMO_BACKUP_SIZE = 1_750_000_000


def ensure_demo_extras(servers: list[Server], owner: User) -> None:
    """Schedules on every server, and one ready backup on the first simulated one that can have
    one."""
    actor = Actor.system("demo")
    with transaction.atomic():
        for server in servers:
            if not server.schedules.exists():
                for data in DEMO_SCHEDULES.get(server.game, ()):
                    schedule_create(server=server, data=data, created_by=owner, actor=actor)
    # A made-up finished backup, so the simulated node has one to show; a server on a real
    # node gets only the backups its node really made. Outside any transaction, as every
    # backup is begun: `backup_create` hands the job to the server's node after its commit.
    simulated = [s for s in servers if host_traits(s.node).invents_readings]
    backed_up = [s for s in simulated if is_supported(s, Capability.BACKUPS)][:1]
    if backed_up and not backed_up[0].backups.exists():
        _backup, job = backup_create(server=backed_up[0], actor=actor, name="First backup")
        job_finish(job_id=job.id, succeeded=True, size_bytes=DEMO_BACKUP_SIZE)


LOCAL_NODE_NAME = "local"


@dataclass(frozen=True)
class LocalNodeSetup:
    """`make run`'s local agent: where it listens, the certificate it presents, and the file
    its token goes to (the agent reads it from there)."""

    url: str
    ca_file: Path
    token_file: Path

    @classmethod
    def from_environment(cls) -> "LocalNodeSetup | None":
        url = os.environ.get("DEMO_NODE_URL", "")
        if not url:
            return None
        return cls(
            url=url,
            ca_file=Path(os.environ["DEMO_NODE_CA_FILE"]),
            token_file=Path(os.environ["DEMO_NODE_TOKEN_FILE"]),
        )


def ensure_local_node(setup: LocalNodeSetup) -> Node:
    """Node `local` on 127.0.0.1 at `setup.url`, trusting `setup.ca_file`, with a working
    token in `setup.token_file` (a token is shown once: a lost file means a new token)."""
    ca_pem = setup.ca_file.read_text()
    node = Node.objects.filter(name=LOCAL_NODE_NAME).first()
    if node is None:
        made = node_create(
            data=NodeInput(name=LOCAL_NODE_NAME, url=setup.url, address="127.0.0.1", ca_pem=ca_pem)
        )
        _write_token(setup.token_file, made.token)
        return made.node
    node.url, node.ca_pem = clean_url(setup.url), clean_ca_pem(ca_pem)
    node.save(update_fields=["url", "ca_pem"])
    written = setup.token_file.read_text().strip() if setup.token_file.is_file() else ""
    found = node_by_token(written) if written else None
    if found is None or found.id != node.id:
        _write_token(setup.token_file, node_rotate_token(node=node))
    return node


def _write_token(path: Path, token: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(token + "\n")
