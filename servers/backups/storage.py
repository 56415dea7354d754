"""Backups kept in the bucket (docs/nodes.md, "Backups off the node").

With object storage configured, a backup of a server on an agent node is an object of the
bucket: the control plane begins its multipart upload before asking the node, hands the node
presigned URLs of the parts as it asks for them (for that backup's upload only), and completes
the upload when the node reports the job's end, once the parts add up to the archive the node
wrote. A job that fails, or whose node goes silent, has its upload aborted: no half object is
ever visible, and no backup is `available` without its whole object.

Deleting a backup in the bucket marks it `deleting`; after commit its object goes, then its
row. A bucket that refuses leaves the row `deleting`, and the catch-up tries again.
"""

import dataclasses
import logging
from datetime import datetime

from django.db import transaction

from audit.actors import Actor
from audit.services import PanelAction
from gshost.errors import InvalidInput
from servers.backups import object_storage
from servers.backups.object_storage import MAX_PARTS
from servers.errors import InvalidState, NodeUnavailable, ObjectStorageError, UploadNotOpen
from servers.models import Backup, BackupLocation, BackupState, Job, JobKind, JobState, Node, Server
from servers.runtime import get_runtime, host_traits

logger = logging.getLogger(__name__)

MAX_URLS_PER_ASK = 64
UNFINISHED = (JobState.QUEUED, JobState.RUNNING)


@dataclasses.dataclass(frozen=True)
class Settled:
    """How a backup job ended once its upload is settled: `completed`, the object is whole."""

    succeeded: bool
    error: str
    completed: bool = False


def backup_key(backup: Backup) -> str:
    return f"backups/{backup.server_id}/{backup.id}.tar.gz"


def in_bucket(backup: Backup | None) -> bool:
    return backup is not None and backup.location == BackupLocation.OBJECT_STORAGE


def backup_location_for(server: Server) -> BackupLocation:
    """Where a new backup of the server goes: the bucket when there is one, for a real node."""
    if object_storage.configured() and host_traits(server.node).keeps_backups_in_bucket:
        return BackupLocation.OBJECT_STORAGE
    return BackupLocation.NODE


def backup_upload_begin(backup: Backup, server: Server) -> None:
    """The backup's multipart upload, begun before the node is asked to send it."""
    try:
        object_storage.upload_begin(backup_key(backup))
    except ObjectStorageError as error:
        raise InvalidState(server.state, f"The backup cannot be stored: {error}.") from None


def backup_part_urls(*, node: Node, backup_id: str, first: int, count: int) -> list[str]:
    """Presigned URLs of parts `first`.. of the backup's upload, for the node making it."""
    if not 1 <= first <= MAX_PARTS or not 1 <= count <= MAX_URLS_PER_ASK:
        raise InvalidInput(
            f"Parts are numbered 1 to {MAX_PARTS}, at most {MAX_URLS_PER_ASK} a time.",
            fields=["first", "count"],
        )
    backup = Backup.objects.filter(id=backup_id, server__node=node).first()
    if backup is None or not in_bucket(backup) or backup.state != BackupState.CREATING:
        raise UploadNotOpen()
    key = backup_key(backup)
    try:
        uploads = object_storage.uploads_in_progress(key)
    except ObjectStorageError as error:
        raise ObjectStorageError(f"The bucket did not answer: {error}.") from None
    if len(uploads) != 1:
        raise UploadNotOpen()
    count = min(count, MAX_PARTS - first + 1)
    return object_storage.part_urls(key, uploads[0], first, count)


def _backup_job(job_id: str, node: Node) -> Job | None:
    """The unfinished backup job (of a server of `node`) whose backup goes to the bucket."""
    job = (
        Job.objects.select_related("backup")
        .filter(id=job_id, kind=JobKind.BACKUP, state__in=UNFINISHED, server__node=node)
        .first()
    )
    return job if job is not None and in_bucket(job.backup) else None


def backup_upload_settle(
    *, node: Node, job_id: str, succeeded: bool, error: str, size_bytes: int | None
) -> Settled:
    """Before a node's report of a backup job's end is recorded: the upload completed (when
    the job succeeded and the parts are all there) or aborted. Reports of other jobs, or of a
    job already finished (a repeat), pass as they are, touching nothing."""
    job = _backup_job(job_id, node)
    if job is None or job.backup is None:
        return Settled(succeeded, error)
    key = backup_key(job.backup)
    if not succeeded:
        backup_upload_discard(key)
        return Settled(False, error)
    try:
        uploads = object_storage.uploads_in_progress(key)
        if not uploads and object_storage.object_size(key) == size_bytes:
            return Settled(True, "", completed=True)  # completed when this report came before
        if len(uploads) != 1:
            raise ObjectStorageError(f"{len(uploads)} uploads of the backup are under way, not 1")
        object_storage.upload_complete(key, uploads[0], size_bytes or 0)
    except ObjectStorageError as failure:
        logger.warning("Backup %s: the upload was not completed: %s", job.backup.id, failure)
        backup_upload_discard(key)
        return Settled(False, f"The archive could not be stored: {failure}.")
    return Settled(True, "", completed=True)


def backup_upload_discard(key: str) -> None:
    """Whatever of an upload is in the bucket, dropped (logged when the bucket refuses)."""
    try:
        object_storage.uploads_abort(key)
    except ObjectStorageError as error:
        logger.warning("%s: the upload was not aborted: %s", key, error)


def backup_object_forget(backup_id: str) -> None:
    """After a job that ended otherwise than its report said (failed meanwhile): the object
    completed for it goes, unless its backup is available after all."""
    backup = Backup.objects.filter(id=backup_id).first()
    if backup is None or backup.state == BackupState.AVAILABLE or not in_bucket(backup):
        return
    try:
        object_storage.object_delete(backup_key(backup))
    except ObjectStorageError as error:
        logger.warning("%s: the object was not deleted: %s", backup_key(backup), error)


def backup_download_url(backup: Backup) -> str:
    """A presigned GET of the backup's object (presigning is local: no call to the bucket)."""
    return object_storage.download_url(backup_key(backup))


def backup_delete(*, backup: Backup, actor: Actor) -> None:
    """The backup gone: one on the node at once; one in the bucket marked `deleting`, its
    object removed after commit, then its row (`backup_deleting_finish`). A backup still being
    made is refused; one already being deleted is left to finish."""
    with transaction.atomic():
        state = Backup.objects.filter(id=backup.id).values_list("state", flat=True).first()
        if state == BackupState.CREATING:
            raise InvalidState(state, "The backup is still being made.")
        if state is None or state == BackupState.DELETING:
            return
        if in_bucket(backup):
            Backup.objects.filter(id=backup.id, state=state).update(state=BackupState.DELETING)
            transaction.on_commit(lambda: backup_deleting_finish(backup.id))
        else:
            Backup.objects.filter(id=backup.id, state=state).delete()
            transaction.on_commit(lambda: _archive_remove(backup))
        actor.audit(
            organization_id=backup.server.organization_id,
            action=PanelAction.BACKUP_DELETE,
            server_id=backup.server_id,
        )


def _archive_remove(backup: Backup) -> None:
    """A deleted backup kept on the node: its archive removed there. A node that is down or
    busy with the server's data keeps the archive (logged); its row is gone all the same."""
    try:
        get_runtime(backup.server).remove_backup(backup.server, backup.id)
    except (NodeUnavailable, InvalidState) as refused:
        logger.warning("Backup %s: its archive stays on the node: %s", backup.id, refused.message)


def backup_deleting_finish(backup_id: str) -> bool:
    """A `deleting` backup's object (and any upload of it) removed from the bucket, then its
    row; False, logged, when the bucket refused: the row stays `deleting` for the catch-up."""
    backup = Backup.objects.filter(id=backup_id, state=BackupState.DELETING).first()
    if backup is None:
        return True
    key = backup_key(backup)
    try:
        object_storage.object_delete(key)
        object_storage.uploads_abort(key)
    except ObjectStorageError as error:
        logger.warning("Backup %s: its object was not deleted yet: %s", backup_id, error)
        return False
    Backup.objects.filter(id=backup_id, state=BackupState.DELETING).delete()
    return True


def backup_objects_remove(server: Server) -> None:
    """Every object (and upload) of the server's backups in the bucket removed, for its
    deletion; ObjectStorageError when the bucket refused one (the caller tries again later;
    removing what is gone already is no error)."""
    stored = Backup.objects.filter(server=server, location=BackupLocation.OBJECT_STORAGE)
    for backup in stored.order_by("created_at"):
        object_storage.object_delete(backup_key(backup))
        object_storage.uploads_abort(backup_key(backup))


DELETING_PER_TICK = 100


def backups_deleting_finish(_now: datetime) -> None:
    """The catch-up's part: every backup left `deleting` (its after-commit removal failed, or
    its process ended first), tried again."""
    deleting = Backup.objects.filter(state=BackupState.DELETING).order_by("created_at")
    for backup_id in deleting.values_list("id", flat=True)[:DELETING_PER_TICK]:
        backup_deleting_finish(backup_id)
