"""Coalesced `last_used_at` / `last_used_ip`: one write a minute per key, or at once on a new IP."""

from datetime import datetime, timedelta

from django.db.models import Q

from accounts.key_records import KeyRecord
from accounts.models import ApiKey
from gshost import process_state
from gshost.lru import LruDict

COALESCE = timedelta(minutes=1)

MAX_KEYS_TRACKED = 10_000
# When this process last wrote each key's use, and from which address. A key dropped from
# here only costs one more conditional UPDATE (the database makes the final call).
_last_written: LruDict[str, tuple[datetime, str | None]] = LruDict(MAX_KEYS_TRACKED)


def _due(record: KeyRecord, ip: str | None, now: datetime) -> bool:
    seen = _last_written.get(record.key_id)
    if seen is None and record.last_used_at is not None:
        seen = (record.last_used_at, record.last_used_ip)
    if seen is None:
        return True
    written_at, written_ip = seen
    return written_ip != ip or now - written_at >= COALESCE


def note_key_used(record: KeyRecord, ip: str | None, now: datetime) -> None:
    if not _due(record, ip, now):
        return
    _last_written.put(record.key_id, (now, ip))
    # Other processes may have written meanwhile: the database makes the final call.
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - COALESCE)
    new_ip = ~Q(last_used_ip=ip) if ip is not None else Q(last_used_ip__isnull=False)
    ApiKey.objects.filter(pk=record.pk).filter(stale | new_ip).update(
        last_used_at=now, last_used_ip=ip
    )


def last_use(record: KeyRecord) -> tuple[datetime | None, str | None]:
    """The freshest last use this process knows of, for the key's own record."""
    seen = _last_written.get(record.key_id)
    if seen is not None and (record.last_used_at is None or seen[0] >= record.last_used_at):
        return seen
    return record.last_used_at, record.last_used_ip


def forget_usage() -> None:
    _last_written.clear()


process_state.register(
    "accounts.usage",
    bound=f"the last write of at most {MAX_KEYS_TRACKED:,} keys, least recently used dropped",
    reset=forget_usage,
)
