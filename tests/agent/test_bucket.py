"""The agent's side of the bucket (gshost_agent.bucket): part sizes, and how parts are sent to
presigned URLs, against a local HTTP server standing in for the store's far side (the real
SeaweedFS runs in tests/servers/test_backups_in_object_storage.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gshost_agent import bucket
from gshost_agent.bucket import (
    LARGEST_PART,
    SMALLEST_PART,
    MultipartSink,
    UploadError,
    part_size_for,
)

GIB = 1024**3


class Store:
    """Answers each PUT with the next scripted status (200 once the script is spent)."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.bodies: list[tuple[str, int]] = []
        store = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                store.bodies.append((self.path, len(body)))
                status = store.statuses.pop(0) if store.statuses else 200
                self.send_response(status)
                self.send_header("ETag", '"etag"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def part_urls(self, first: int, count: int) -> list[str]:
        return [
            f"{self.url}/bucket/key?partNumber={n}&X-Amz-Signature=s"
            for n in range(first, first + count)
        ]


@pytest.fixture
def store() -> Iterator[Store]:
    started = Store()
    yield started
    started.server.shutdown()
    started.server.server_close()


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bucket, "RETRY_SECONDS", 0.0)


def sink_for(store: Store, part_size: int = SMALLEST_PART) -> MultipartSink:
    return MultipartSink(part_size, store.part_urls, threading.Event())


def test_parts_are_8_mib_for_small_worlds_and_grow_to_64_mib_at_most():
    assert part_size_for(0) == part_size_for(GIB) == SMALLEST_PART
    assert part_size_for(20 * GIB) == 4 * SMALLEST_PART
    assert part_size_for(10_000 * GIB) == LARGEST_PART == 64 * 1024**2


def test_the_archive_is_cut_into_full_parts_and_a_shorter_last_one(store):
    sink = sink_for(store)
    piece = memoryview(b"x" * (3 * 1024**2))
    for _ in range(6):  # 18 MiB in pieces that do not fall on part boundaries
        sink.write(piece)

    assert sink.finish() == 3
    assert [size for _path, size in store.bodies] == [SMALLEST_PART, SMALLEST_PART, 2 * 1024**2]
    assert [path.split("partNumber=")[1][0] for path, _ in store.bodies] == ["1", "2", "3"]


def test_a_part_that_fails_for_a_moment_is_sent_again(store):
    store.statuses = [503]
    sink = sink_for(store)
    sink.write(memoryview(b"y" * 1000))

    assert sink.finish() == 1
    assert [size for _path, size in store.bodies] == [1000, 1000]


def test_a_part_the_bucket_refuses_fails_the_upload(store):
    store.statuses = [403]
    sink = sink_for(store)
    sink.write(memoryview(b"z" * 1000))

    with pytest.raises(UploadError, match="403"):
        sink.finish()
    assert len(store.bodies) == 1


def test_a_part_that_keeps_failing_fails_the_upload_after_three_tries(store):
    store.statuses = [500, 500, 500]
    sink = sink_for(store)
    sink.write(memoryview(b"z" * 1000))

    with pytest.raises(UploadError, match="500"):
        sink.finish()
    assert len(store.bodies) == 3


def test_the_writer_stops_once_the_sender_failed(store):
    store.statuses = [403]
    sink = sink_for(store, part_size=SMALLEST_PART)
    part = memoryview(b"w" * SMALLEST_PART)

    with pytest.raises(UploadError):
        for _ in range(10):
            sink.write(part)
    sink.abandon()
    assert len(store.bodies) == 1
