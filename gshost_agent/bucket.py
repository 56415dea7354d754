"""Archives to and from object storage, through presigned URLs the control plane hands out
(docs/agent-protocol.md, "Backups in object storage"). The agent holds no storage credentials:
a URL opens one part of one upload, or one object, for minutes.

A backup is streamed as it is written: the compressed archive fills a part buffer; a full part
goes to a sender thread that PUTs it while the next one fills. At most two parts are in memory
(the one being sent and the one filling), so the agent's memory does not grow with the world,
and the archive never touches the local disk. Part sizes follow the world's size: 8 MiB for
small worlds, doubling up to 64 MiB so that even large ones stay far below S3's 10,000 parts.
A part that fails for a moment (a reset connection, a 5xx) is sent again from memory.

A restore reads the archive with one presigned GET, streamed into the extraction
(`archives.restore_stream`), which swaps nothing in until the SHA-256 and size are checked.
"""

from __future__ import annotations

import http.client
import logging
import queue
import ssl
import threading
import time
from collections.abc import Callable
from urllib.parse import SplitResult, urlsplit

logger = logging.getLogger("gshost_agent.bucket")

MIB = 1024 * 1024
SMALLEST_PART = 8 * MIB  # above S3's 5 MiB floor for every part but the last
LARGEST_PART = 64 * MIB
PARTS_BEFORE_GROWING = 1000  # a world this many smallest parts large gets larger parts
MOST_PARTS = 10_000  # S3's limit per upload
URLS_PER_ASK = 16
ATTEMPTS = 3
RETRY_SECONDS = 1.0
SOCKET_SECONDS = 120.0
WAIT_STEP_SECONDS = 0.5

PartUrls = Callable[[int, int], list[str]]  # (first part number, count) -> presigned PUT URLs


class UploadError(Exception):
    """The archive could not be sent to the bucket: why, in a sentence."""


def part_size_for(expected_bytes: int) -> int:
    """The part size for an archive of about `expected_bytes` (the world's size, which a
    compressed archive does not exceed by more than its headers)."""
    size = SMALLEST_PART
    while size < LARGEST_PART and expected_bytes > size * PARTS_BEFORE_GROWING:
        size *= 2
    return size


def _connect(url: SplitResult) -> http.client.HTTPConnection:
    host = url.hostname or ""
    if url.scheme == "https":
        return http.client.HTTPSConnection(
            host, url.port, timeout=SOCKET_SECONDS, context=ssl.create_default_context()
        )
    if url.scheme == "http":
        return http.client.HTTPConnection(host, url.port, timeout=SOCKET_SECONDS)
    raise UploadError(f"not an http(s) URL: {url.scheme}")


def _target(url: SplitResult) -> str:
    return f"{url.path}?{url.query}" if url.query else url.path


class MultipartSink:
    """Where `archives.stream_backup` writes: parts of `part_size` bytes (the last one
    shorter), each PUT to its presigned URL by a thread of its own."""

    def __init__(self, part_size: int, urls: PartUrls, ending: threading.Event) -> None:
        self.part_size = part_size
        self.urls = urls
        self.ending = ending
        self.parts = 0
        self.error: BaseException | None = None
        # Two buffers, made once: one fills while the sender has the other.
        self._filling, self._filled = bytearray(part_size), 0
        self._free: queue.Queue[bytearray] = queue.Queue()
        self._free.put(bytearray(part_size))
        self._queue: queue.Queue[tuple[int, bytearray, int] | None] = queue.Queue()
        self._known: dict[int, str] = {}
        self._connection: http.client.HTTPConnection | None = None
        self._origin = ""
        self._thread = threading.Thread(target=self._send_all, name="gshost-upload", daemon=True)
        self._thread.start()

    def write(self, view: memoryview) -> None:
        while view:
            taken = view[: self.part_size - self._filled]
            self._filling[self._filled : self._filled + len(taken)] = taken
            self._filled += len(taken)
            view = view[len(taken) :]
            if self._filled == self.part_size:
                self._hand_off()
                self._filling, self._filled = self._free_buffer(), 0

    def finish(self) -> int:
        """The last part sent, and every part acknowledged; how many parts there are."""
        if self._filled or self.parts == 0:
            self._hand_off()
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.parts

    def abandon(self) -> None:
        """The job ends without the archive: nothing more is sent (the control plane aborts
        the upload when the job's failure reaches it)."""
        self.error = self.error or UploadError("abandoned")
        self._queue.put(None)
        # A part in flight may take long to fail: the (daemon) sender is not waited for, so
        # an agent that ends is not held up by it.
        self._thread.join(timeout=WAIT_STEP_SECONDS)

    def _hand_off(self) -> None:
        if self.error is not None:
            raise self.error
        if self.parts >= MOST_PARTS:
            raise UploadError(f"the archive outgrew {MOST_PARTS} parts of {self.part_size} bytes")
        self.parts += 1
        self._queue.put((self.parts, self._filling, self._filled))

    def _free_buffer(self) -> bytearray:
        """The buffer the sender gives back once its part is sent."""
        while True:
            try:
                return self._free.get(timeout=WAIT_STEP_SECONDS)
            except queue.Empty:
                if self.error is not None:
                    raise self.error from None
                if self.ending.is_set():
                    raise UploadError("the agent is ending") from None

    def _send_all(self) -> None:
        try:
            while (item := self._queue.get()) is not None:
                number, buffer, length = item
                if self.error is None:
                    self._send(number, memoryview(buffer)[:length])
                self._free.put(buffer)
        except BaseException as error:
            self.error = error
        finally:
            if self._connection is not None:
                self._connection.close()

    def _url(self, number: int) -> str:
        if number not in self._known:
            urls = self.urls(number, min(URLS_PER_ASK, MOST_PARTS - number + 1))
            if not urls:
                raise UploadError("the control plane gave no URL for the next part")
            self._known = {number + offset: url for offset, url in enumerate(urls)}
        return self._known.pop(number)

    def _send(self, number: int, data: memoryview) -> None:
        url = urlsplit(self._url(number))
        for attempt in range(1, ATTEMPTS + 1):
            if self.ending.is_set():
                raise UploadError("the agent is ending")
            try:
                status = self._put(url, data)
            except (OSError, http.client.HTTPException) as error:
                self._drop_connection()
                why = f"part {number}: {type(error).__name__}"
            else:
                if status < 300:
                    return
                why = f"part {number}: the bucket answered {status}"
                if status < 500 and status not in (408, 429):
                    raise UploadError(why)
            logger.warning("upload: %s (attempt %s of %s)", why, attempt, ATTEMPTS)
            if attempt < ATTEMPTS:
                time.sleep(RETRY_SECONDS * attempt)
        raise UploadError(why)

    def _put(self, url: SplitResult, data: memoryview) -> int:
        origin = f"{url.scheme}://{url.netloc}"
        if self._connection is None or origin != self._origin:
            self._drop_connection()
            self._connection, self._origin = _connect(url), origin
        self._connection.request(
            "PUT", _target(url), body=data, headers={"Content-Length": str(len(data))}
        )
        answer = self._connection.getresponse()
        answer.read()
        if answer.will_close:
            self._drop_connection()
        return answer.status

    def _drop_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class Download:
    """One presigned GET, read as a stream (`read(size)`); UploadError when refused."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.connection = _connect(parts)
        try:
            self.connection.request("GET", _target(parts))
            self.answer = self.connection.getresponse()
        except (OSError, http.client.HTTPException) as error:
            self.connection.close()
            why = f"the archive could not be fetched ({type(error).__name__})"
            raise UploadError(why) from error
        if self.answer.status != 200:
            self.connection.close()
            raise UploadError(f"the bucket refused the archive ({self.answer.status})")

    def read(self, size: int = -1) -> bytes:
        return self.answer.read(size)

    def close(self) -> None:
        self.connection.close()
