"""The wire: one HTTPS POST of a webhook attempt, DNS-pinned, deadline-bound, pooled.

The URL was parsed once, by ``webhooks.targets.url_safety.check_webhook_url``; this module
connects to the ``CheckedUrl`` it returned and never parses the URL again.

Every attempt resolves the host, requires every resolved address to be allowed, and connects to
a checked address while SNI, certificate verification and the ``Host`` header keep using the
URL's name, so a DNS answer that changes after the check cannot steer the request elsewhere.

The attempt's deadline starts before name resolution: a resolver slower than what is left of it
ends the attempt as a ``timeout`` (the lookup, which cannot be interrupted, finishes on its own
daemon thread; at most MAX_RESOLUTIONS are under way per process).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import certifi
import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import NewConnectionError
from urllib3.exceptions import SSLError as Urllib3SSLError
from urllib3.exceptions import TimeoutError as Urllib3TimeoutError
from urllib3.util import SKIP_HEADER

from gshost import process_state
from gshost.errors import Misuse, Unavailable
from webhooks.delivery.policy import is_success
from webhooks.models import AttemptError
from webhooks.targets.url_safety import CheckedUrl, is_public_ip

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

logger = logging.getLogger(__name__)

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver: TypeAlias = Callable[[str, int], list[IPAddress]]
AddressPolicy: TypeAlias = Callable[[IPAddress], bool]

USER_AGENT: Final = "Service-Webhooks/1"
MAX_READ_BYTES: Final = 64 * 1024
MAX_STORED_BYTES: Final = 16 * 1024
DEFAULT_TIMEOUT_SECONDS: Final = 10.0
_READ_CHUNK_BYTES: Final = 16 * 1024
MAX_RESOLUTIONS: Final = 32
# Framing headers are the sender's job; letting callers set them could desynchronise the body.
_SENDER_HEADERS: Final = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
)

# A transport failure this quick is taken for a dead pooled connection (it takes a round trip,
# more on a busy worker), not a slow or failing receiver. The second try keeps the deadline.
STALE_CONNECTION_SECONDS: Final = 1.0
_STALE_CONNECTION_ERRORS: Final = frozenset({AttemptError.CONNECTION_ERROR, AttemptError.TLS_ERROR})


@dataclass(frozen=True)
class AttemptResult:
    started_at: datetime
    duration_ms: int
    status_code: int | None
    response_body: str
    request_headers: dict[str, str]
    response_headers: dict[str, str]
    error: str | None
    # Set while a name lookup the attempt gave up on (at its deadline) is still under way.
    lookup_under_way: threading.Event | None = field(default=None, compare=False, repr=False)

    @property
    def succeeded(self) -> bool:
        return is_success(self.status_code, self.error)


@dataclass(frozen=True)
class _Outcome:
    error: str | None
    status_code: int | None = None
    response_body: str = ""
    response_headers: dict[str, str] = field(default_factory=dict)


class _Unresolved(Unavailable):
    """The receiver's name gave no address this time (the message is the name)."""


def resolve_host(host: str, port: int) -> list[IPAddress]:
    """Resolve ``host`` with the system resolver, keeping getaddrinfo's preference order."""
    addresses: list[IPAddress] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = ipaddress.ip_address(str(sockaddr[0]))
        if address not in addresses:
            addresses.append(address)
    return addresses


# --- wall-clock deadline ------------------------------------------------------------------------

_attempt_state = threading.local()


def _remaining_seconds() -> float | None:
    deadline: float | None = getattr(_attempt_state, "deadline", None)
    if deadline is None:
        return None
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("webhook attempt deadline exceeded")
    return remaining


_resolutions = threading.BoundedSemaphore(MAX_RESOLUTIONS)


def _resolve_in_time(resolve: Resolver, host: str, port: int) -> list[IPAddress]:
    """``resolve(host, port)`` within the attempt's remaining time, else TimeoutError.

    getaddrinfo cannot be interrupted, so the lookup runs on a daemon thread of its own (which
    never delays the process's exit) and is abandoned when the deadline passes.
    """
    gate = _resolutions  # released to the semaphore it was taken from, even after a reset
    if not gate.acquire(timeout=_remaining_seconds() or 0):
        raise TimeoutError("too many name resolutions under way")
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def lookup() -> None:
        try:
            outcome["addresses"] = resolve(host, port)
        except BaseException as exc:  # handed to the attempt's thread
            outcome["error"] = exc
        finally:
            gate.release()
            done.set()

    threading.Thread(target=lookup, name="webhook-resolve", daemon=True).start()
    if not done.wait(_remaining_seconds()):
        _attempt_state.lookup_under_way = done
        raise TimeoutError("name resolution outlasted the attempt's deadline")
    if "error" in outcome:
        raise outcome["error"]
    addresses: list[IPAddress] = outcome["addresses"]
    return addresses


class _DeadlineSSLSocket(ssl.SSLSocket):
    """Re-arms the socket timeout with the attempt's remaining time before each TLS operation.

    A plain per-operation timeout restarts on every byte, so a peer trickling its status line,
    headers or body could hold an attempt indefinitely. Attempts run on one thread, so the
    deadline travels in a thread-local; outside an attempt the socket behaves normally.
    """

    def _arm(self) -> None:
        remaining = _remaining_seconds()
        if remaining is not None:
            self.settimeout(remaining)

    def do_handshake(self, block: bool = False) -> None:
        self._arm()
        super().do_handshake(block)

    def read(self, len: int = 1024, buffer: WriteableBuffer | None = None) -> bytes:
        self._arm()
        return super().read(len, buffer)

    def send(self, data: ReadableBuffer, flags: int = 0) -> int:
        self._arm()
        return super().send(data, flags)


def ssl_context_for(ca_bundle: str | None) -> ssl.SSLContext:
    """Shared client context for a CA bundle (certifi's when None): building one parses the
    whole bundle, so it is built once per version of the file."""
    path = ca_bundle or certifi.where()
    stat = os.stat(path)
    return _build_ssl_context(os.path.abspath(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _build_ssl_context(path: str, _mtime_ns: int, _size: int) -> ssl.SSLContext:
    # Only the given bundle is trusted: SSL_CERT_FILE and friends are never consulted because
    # load_default_certs() is not called when a cafile is given.
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=path)
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    context.hostname_checks_common_name = False
    context.sslsocket_class = _DeadlineSSLSocket
    return context


def forget_resolutions_and_contexts() -> None:
    """A fresh semaphore (lookups still running release the one they took) and no SSL context
    cached."""
    global _resolutions
    _resolutions = threading.BoundedSemaphore(MAX_RESOLUTIONS)
    _build_ssl_context.cache_clear()


process_state.register(
    "webhooks.transport",
    bound=f"{MAX_RESOLUTIONS} name resolutions under way, 8 SSL contexts (one per CA bundle "
    "file version)",
    reset=forget_resolutions_and_contexts,
)


# --- connection pools ---------------------------------------------------------------------------


class _PoolCache:
    """Thread-safe LRU of keep-alive pools keyed by (host, port, pinned address)."""

    def __init__(self, context: ssl.SSLContext, max_pools: int, per_host: int) -> None:
        self._context = context
        self._max_pools = max_pools
        self._per_host = per_host
        self._pools: OrderedDict[tuple[str, int, IPAddress], urllib3.HTTPSConnectionPool] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def get(self, target: CheckedUrl, address: IPAddress) -> urllib3.HTTPSConnectionPool:
        key = (target.host, target.port, address)
        evicted = None
        with self._lock:
            pool = self._pools.get(key)
            if pool is not None:
                self._pools.move_to_end(key)
                return pool
            pool = self._new_pool(target, address)
            self._pools[key] = pool
            if len(self._pools) > self._max_pools:
                _, evicted = self._pools.popitem(last=False)
        if evicted is not None:
            evicted.close()  # connections still in use are closed when they are returned
        return pool

    def _new_pool(self, target: CheckedUrl, address: IPAddress) -> urllib3.HTTPSConnectionPool:
        return urllib3.HTTPSConnectionPool(
            host=str(address),
            port=target.port,
            maxsize=self._per_host,
            block=False,
            retries=False,
            cert_reqs="CERT_REQUIRED",
            ssl_context=self._context,
            server_hostname=target.host,
        )

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.close()


# --- the sender ---------------------------------------------------------------------------------


class WebhookSender:
    """Sends delivery attempts; one instance is meant to be shared by many sender threads.

    With ``retry_stale_connections``, a request that fails on the transport within
    ``STALE_CONNECTION_SECONDS`` is tried once more, within the same deadline. A receiver may
    close an idle keep-alive connection just as a request is written on it (Node's default
    keep-alive timeout is 5 s); the request then fails at once with "remote end closed
    connection without response" or a TLS EOF. Repeating it on a new connection, as browsers
    do, spares a retry a minute later; the receiver sees the request at most twice, which the
    retry plan allows anyway.
    """

    def __init__(
        self,
        *,
        ca_bundle: str | None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        allowed_networks: Sequence[IPNetwork] = (),
        resolve: Resolver | None = None,
        address_allowed: AddressPolicy | None = None,
        max_pools: int = 256,
        max_connections_per_host: int = 4,
        retry_stale_connections: bool = True,
    ) -> None:
        if timeout <= 0:
            raise Misuse("timeout must be positive")
        self._timeout = timeout
        self._allowed_networks = tuple(allowed_networks)
        self._resolve = resolve or resolve_host
        self._address_allowed = address_allowed or is_public_ip
        self._pools = _PoolCache(ssl_context_for(ca_bundle), max_pools, max_connections_per_host)
        self._retry_stale_connections = retry_stale_connections

    def __enter__(self) -> WebhookSender:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._pools.close()

    def send(self, *, target: CheckedUrl, body: bytes, headers: Mapping[str, str]) -> AttemptResult:
        """Make one attempt to ``target`` (what ``check_webhook_url`` returned); transport
        failures are reported in the result, never raised."""
        request_headers = _request_headers(target, body, headers)
        started_at = datetime.now(UTC)
        start = time.monotonic()
        _attempt_state.lookup_under_way = None
        outcome = self._attempt(target, body, request_headers, start + self._timeout)
        return AttemptResult(
            lookup_under_way=_attempt_state.lookup_under_way,
            started_at=started_at,
            duration_ms=int((time.monotonic() - start) * 1000),
            status_code=outcome.status_code,
            response_body=outcome.response_body,
            request_headers=request_headers,
            response_headers=outcome.response_headers,
            error=outcome.error,
        )

    def _attempt(
        self, target: CheckedUrl, body: bytes, headers: dict[str, str], deadline: float
    ) -> _Outcome:
        _attempt_state.deadline = deadline  # name resolution counts against it too
        try:
            try:
                addresses = self._checked_addresses(target)
            except _Unresolved:
                # DNS trouble may pass: a retryable connection error, not a refused address.
                return _Outcome(error=AttemptError.CONNECTION_ERROR)
            except TimeoutError:
                return _Outcome(error=AttemptError.TIMEOUT)
            if not addresses:
                return _Outcome(error=AttemptError.ADDRESS_REJECTED)
            started = time.monotonic()
            outcome = self._try_exchange(target, addresses, body, headers)
            if (
                self._retry_stale_connections
                and outcome.error in _STALE_CONNECTION_ERRORS
                and time.monotonic() - started < STALE_CONNECTION_SECONDS
            ):
                outcome = self._try_exchange(target, addresses, body, headers)
            return outcome
        finally:
            _attempt_state.deadline = None

    def _try_exchange(
        self, target: CheckedUrl, addresses: list[IPAddress], body: bytes, headers: dict[str, str]
    ) -> _Outcome:
        try:
            return self._exchange(target, addresses, body, headers)
        except (Urllib3Error, OSError) as exc:
            error = _classify(exc)
            logger.debug(
                "Webhook attempt to %s failed: %s (%s)", target.host, error, type(exc).__name__
            )
            return _Outcome(error=error)

    def _checked_addresses(self, target: CheckedUrl) -> list[IPAddress]:
        """Addresses to try, or an empty list when the attempt must not connect at all."""
        if target.ip is not None:
            candidates = [target.ip]
        else:
            try:
                candidates = _resolve_in_time(self._resolve, target.host, target.port)
            except TimeoutError:
                logger.debug("Webhook host %s did not resolve in time", target.host)
                raise
            except (OSError, UnicodeError) as exc:
                logger.debug("Webhook host %s did not resolve", target.host)
                raise _Unresolved(target.host) from exc
            if not candidates:
                raise _Unresolved(target.host)
        if all(self._is_permitted(address) for address in candidates):
            return candidates
        logger.info("Webhook host %s resolved to a disallowed address", target.host)
        return []

    def _is_permitted(self, address: IPAddress) -> bool:
        if any(address in network for network in self._allowed_networks):
            return True
        return self._address_allowed(address)

    def _exchange(
        self, target: CheckedUrl, addresses: list[IPAddress], body: bytes, headers: dict[str, str]
    ) -> _Outcome:
        wire_headers = {**headers, "Accept-Encoding": SKIP_HEADER}
        for index, address in enumerate(addresses):
            remaining = _remaining_seconds()
            try:
                response = self._pools.get(target, address).urlopen(
                    "POST",
                    target.request_target,
                    body=body,
                    headers=wire_headers,
                    retries=False,
                    redirect=False,
                    assert_same_host=False,
                    timeout=urllib3.Timeout(connect=remaining, read=remaining),
                    preload_content=False,
                    decode_content=False,
                    release_conn=False,
                )
            except NewConnectionError:
                # Nothing was sent yet, so another checked address can be tried safely.
                if index == len(addresses) - 1:
                    raise
                continue
            return _read_response(response)
        raise AssertionError("unreachable: addresses is never empty")


def _request_headers(target: CheckedUrl, body: bytes, headers: Mapping[str, str]) -> dict[str, str]:
    built = {"Host": target.host_header}
    built.update(
        (name, value) for name, value in headers.items() if name.lower() not in _SENDER_HEADERS
    )
    if not any(name.lower() == "user-agent" for name in built):
        built["User-Agent"] = USER_AGENT
    built["Content-Length"] = str(len(body))
    return built


def _read_response(response: urllib3.BaseHTTPResponse) -> _Outcome:
    complete = False
    try:
        raw, complete = _read_capped(response)
    finally:
        if not complete:
            response.close()  # unread bytes would corrupt the next request on this connection
        response.release_conn()
    status = response.status
    return _Outcome(
        error=AttemptError.REDIRECT if 300 <= status < 400 else None,
        status_code=status,
        response_body=_stored_text(raw),
        response_headers=dict(response.headers),
    )


def _read_capped(response: urllib3.BaseHTTPResponse) -> tuple[bytes, bool]:
    """Read at most MAX_READ_BYTES; report whether the body ended within that."""
    buffer = bytearray()
    while len(buffer) < MAX_READ_BYTES:
        _remaining_seconds()
        wanted = min(_READ_CHUNK_BYTES, MAX_READ_BYTES - len(buffer))
        chunk = response.read(wanted, decode_content=False)
        if not chunk:
            return bytes(buffer), True
        buffer += chunk
    return bytes(buffer), response.closed


def _stored_text(raw: bytes) -> str:
    # PostgreSQL text columns reject NUL characters.
    return raw[:MAX_STORED_BYTES].decode("utf-8", errors="replace").replace("\x00", "\ufffd")


def _classify(exc: BaseException) -> AttemptError:
    chain = list(_exception_chain(exc))
    if any(_is_timeout(error) for error in chain):
        return AttemptError.TIMEOUT
    if any(isinstance(error, (ssl.SSLError, Urllib3SSLError)) for error in chain):
        return AttemptError.TLS_ERROR
    return AttemptError.CONNECTION_ERROR


def _is_timeout(error: BaseException) -> bool:
    # urllib3 derives NewConnectionError (refused, unreachable) from its ConnectTimeoutError.
    if isinstance(error, NewConnectionError):
        return False
    return isinstance(error, (TimeoutError, Urllib3TimeoutError))


def _exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, its causes and contexts, and exceptions carried in args (urllib3 wraps)."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = (current.__cause__, current.__context__, *current.args)
        pending.extend(item for item in linked if isinstance(item, BaseException))
