"""The bucket backups go to (settings BACKUP_S3_*), through boto3. Only the control plane holds
the keys: agents get presigned URLs, each for one object (one part of one upload, or one GET),
valid for minutes.

The control plane itself begins, completes and aborts multipart uploads and deletes objects;
an agent only PUTs parts and GETs archives. An upload in progress is found by its object key
(ListMultipartUploads), so nothing of it needs storing beside the backup.
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import boto3
from botocore.client import Config
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from gshost import process_state
from gshost.handoff import require_outside_transaction
from servers.errors import ObjectStorageError

PART_URL_SECONDS = 3600  # a part is sent within minutes of asking; slow links get an hour
GET_URL_SECONDS = 900  # checked when the download begins, not while it runs
MAX_PARTS = 10_000  # S3's limit per upload
CONNECT_SECONDS = 5
READ_SECONDS = 60


@dataclass(frozen=True)
class UploadedObject:
    size_bytes: int
    parts: int


def configured() -> bool:
    return bool(settings.BACKUP_S3_ENDPOINT and settings.BACKUP_S3_BUCKET)


@lru_cache(maxsize=1)
def _client() -> Any:
    return boto3.client(
        "s3",
        endpoint_url=settings.BACKUP_S3_ENDPOINT,
        aws_access_key_id=settings.BACKUP_S3_ACCESS_KEY_ID,
        aws_secret_access_key=settings.BACKUP_S3_SECRET_ACCESS_KEY,
        region_name=settings.BACKUP_S3_REGION,
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            connect_timeout=CONNECT_SECONDS,
            read_timeout=READ_SECONDS,
            retries={"max_attempts": 3, "mode": "standard"},
        ),
    )


def reset_client() -> None:
    _client.cache_clear()


process_state.register(
    "servers.backups.object_storage",
    bound="one boto3 client (the BACKUP_S3_* settings), made on first use",
    reset=reset_client,
)


def _call(what: str, method: str, **params: Any) -> Any:
    require_outside_transaction(f"The bucket's {method}")
    try:
        return getattr(_client(), method)(Bucket=settings.BACKUP_S3_BUCKET, **params)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "error")
        raise ObjectStorageError(f"the bucket refused to {what} ({code})") from error
    except BotoCoreError as error:
        raise ObjectStorageError(f"the bucket could not {what} ({type(error).__name__})") from error


def upload_begin(key: str) -> str:
    """A new multipart upload of `key`; its upload id."""
    return str(_call("begin the upload", "create_multipart_upload", Key=key)["UploadId"])


def uploads_in_progress(key: str) -> list[str]:
    """The ids of the uploads of `key` under way (one, unless something went wrong)."""
    answer = _call("list the uploads", "list_multipart_uploads", Prefix=key)
    return [str(u["UploadId"]) for u in answer.get("Uploads", []) if u.get("Key") == key]


def part_urls(key: str, upload_id: str, first: int, count: int) -> list[str]:
    """Presigned PUT URLs of parts `first` .. `first + count - 1` of that upload only."""
    client = _client()
    return [
        client.generate_presigned_url(
            "upload_part",
            Params={
                "Bucket": settings.BACKUP_S3_BUCKET,
                "Key": key,
                "UploadId": upload_id,
                "PartNumber": number,
            },
            ExpiresIn=PART_URL_SECONDS,
        )
        for number in range(first, first + count)
    ]


def upload_complete(key: str, upload_id: str, size_bytes: int) -> UploadedObject:
    """The parts joined into the object, once they are numbered 1..n without a gap and add up
    to `size_bytes` (what the agent wrote); ObjectStorageError otherwise (nothing joined)."""
    parts: list[dict[str, Any]] = []
    marker = 0
    while True:
        answer = _call(
            "list the parts", "list_parts", Key=key, UploadId=upload_id, PartNumberMarker=marker
        )
        parts += answer.get("Parts", [])
        if not answer.get("IsTruncated"):
            break
        marker = int(answer["NextPartNumberMarker"])
    numbers = [int(part["PartNumber"]) for part in parts]
    total = sum(int(part["Size"]) for part in parts)
    if numbers != list(range(1, len(numbers) + 1)) or total != size_bytes:
        raise ObjectStorageError(
            f"the bucket holds {len(parts)} parts of {total} bytes, not the {size_bytes} "
            "bytes the node sent"
        )
    listing = [{"PartNumber": int(p["PartNumber"]), "ETag": p["ETag"]} for p in parts]
    _call(
        "complete the upload",
        "complete_multipart_upload",
        Key=key,
        UploadId=upload_id,
        MultipartUpload={"Parts": listing},
    )
    return UploadedObject(size_bytes=total, parts=len(parts))


def uploads_abort(key: str) -> int:
    """Every upload of `key` under way aborted (its parts dropped); how many there were."""
    found = uploads_in_progress(key)
    for upload_id in found:
        _call("abort the upload", "abort_multipart_upload", Key=key, UploadId=upload_id)
    return len(found)


def object_size(key: str) -> int | None:
    """The size of the object `key`, or None when there is none."""
    require_outside_transaction("The bucket's head_object")
    try:
        answer = _client().head_object(Bucket=settings.BACKUP_S3_BUCKET, Key=key)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise ObjectStorageError(f"the bucket refused to look at the object ({error})") from error
    except BotoCoreError as error:
        why = f"the bucket could not look at the object ({type(error).__name__})"
        raise ObjectStorageError(why) from error
    return int(answer["ContentLength"])


def download_url(key: str) -> str:
    """A presigned GET of the object `key` alone."""
    return str(
        _client().generate_presigned_url(
            "get_object",
            Params={"Bucket": settings.BACKUP_S3_BUCKET, "Key": key},
            ExpiresIn=GET_URL_SECONDS,
        )
    )


def object_delete(key: str) -> None:
    _call("delete the object", "delete_object", Key=key)
