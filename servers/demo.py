"""Schedules and a backup for the demo organization's servers (the `demo` command).

Idempotent: a server that already has schedules or backups is left as it is.
"""

from django.db import transaction

from accounts.models import User
from audit.actors import Actor
from servers.capabilities import Capability, is_supported
from servers.jobs import backup_create, job_finish
from servers.models import Game, Server
from servers.schedules import ScheduleInput, schedule_create

DEMO_SCHEDULES: dict[str, tuple[ScheduleInput, ...]] = {
    Game.MINECRAFT: (
        ScheduleInput("Autosave", "*/15 * * * *", "save-all", alert_on=("failed",)),
        ScheduleInput("Vote reminder", "0 * * * *", "say Remember to vote for us!"),
    ),
    Game.CUSTOM: (
        ScheduleInput(
            "Nightly track reset", "0 4 * * *", "reset-track", alert_on=("failed", "skipped")
        ),
    ),
}
DEMO_BACKUP_SIZE = 1_750_000_000


def ensure_demo_extras(servers: list[Server], owner: User) -> None:
    """Schedules on every server, and one ready backup on the first that can have one."""
    actor = Actor.system("demo")
    with transaction.atomic():
        for server in servers:
            if not server.schedules.exists():
                for data in DEMO_SCHEDULES.get(server.game, ()):
                    schedule_create(server=server, data=data, created_by=owner, actor=actor)
        backed_up = [s for s in servers if is_supported(s, Capability.BACKUPS)][:1]
        if backed_up and not backed_up[0].backups.exists():
            _backup, job = backup_create(server=backed_up[0], actor=actor, name="First backup")
            job_finish(job_id=job.id, succeeded=True, size_bytes=DEMO_BACKUP_SIZE)
