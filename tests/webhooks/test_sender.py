"""Tests for the delivery transport against a real local HTTPS receiver (no database, no Django)."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.webhooks.receiver import (
    LOOPBACK,
    LOOPBACK_NETWORKS,
    HttpsReceiver,
    loopback_resolver,
)
from webhooks.signing import signature_headers, verify
from webhooks.targets.transport import AttemptResult, WebhookSender
from webhooks.targets.url_safety import parse_webhook_url

SECRET = "whsec_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0u1V"
BODY = '{"event":"server.started","data":{"name":"Überleben \\u0000"}}\n'.encode()
NAME = "hooks.example.test"
# Generous for answers that should arrive (the machine may be busy); the deadline tests use a
# short one and a receiver that would otherwise need several times as long.
TIMEOUT = 5.0
SHORT_TIMEOUT = 1.0
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
SenderFactory = Callable[..., WebhookSender]


def webhook_headers(body: bytes = BODY) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        **signature_headers(SECRET, body),
        "User-Agent": "Service-Webhooks/1",
        "X-Webhook-Event": "server.started",
        "X-Webhook-Delivery": "dlv_01J0000000000000000000000",
    }


def post(sender: WebhookSender, url: str, body: bytes = BODY) -> AttemptResult:
    return sender.send(target=parse_webhook_url(url), body=body, headers=webhook_headers(body))


@pytest.fixture
def make_sender() -> Iterator[SenderFactory]:
    created: list[WebhookSender] = []

    def make(receiver: HttpsReceiver, **overrides: Any) -> WebhookSender:
        options: dict[str, Any] = {
            "ca_bundle": receiver.ca_pem_path,
            "timeout": TIMEOUT,
            "allowed_networks": LOOPBACK_NETWORKS,
            "resolve": loopback_resolver,
            **overrides,
        }
        sender = WebhookSender(**options)
        created.append(sender)
        return sender

    yield make
    for sender in created:
        sender.close()


@pytest.fixture
def named_receiver() -> Iterator[HttpsReceiver]:
    """A receiver whose certificate is valid for NAME only."""
    with HttpsReceiver(names=(NAME,)) as receiver:
        yield receiver


@pytest.fixture
def ipv6_receiver() -> Iterator[HttpsReceiver]:
    receiver = HttpsReceiver(names=(NAME,), bind="::1")
    try:
        receiver.start()
    except OSError:
        receiver.stop()
        pytest.skip("no IPv6 loopback here")
    yield receiver
    receiver.stop()


class RecordingResolver:
    def __init__(self, *answers: list[IPAddress]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.calls.append((host, port))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_it_posts_exactly_the_webhook_headers(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    post(make_sender(https_receiver), https_receiver.url())

    (request,) = https_receiver.requests
    assert request.method == "POST"
    assert sorted(name.lower() for name, _ in request.headers) == [
        "content-length",
        "content-type",
        "host",
        "user-agent",
        "x-webhook-delivery",
        "x-webhook-event",
        "x-webhook-signature",
        "x-webhook-timestamp",
    ]


def test_it_posts_the_body_byte_for_byte(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    post(make_sender(https_receiver), https_receiver.url())

    (request,) = https_receiver.requests
    assert request.body == BODY
    assert verify(SECRET, dict(request.headers), request.body)


def test_it_records_the_request_headers_as_sent(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    result = post(make_sender(https_receiver), https_receiver.url())

    assert result.request_headers == dict(https_receiver.requests[0].headers)
    assert result.request_headers["Host"] == f"localhost:{https_receiver.port}"


def test_it_sends_path_and_query_as_the_request_target(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    post(make_sender(https_receiver), https_receiver.url("/in/hooks?token=abc&x=%2F#frag"))

    assert https_receiver.requests[0].path == "/in/hooks?token=abc&x=%2F"


def test_it_succeeds_on_a_2xx_answer(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    https_receiver.set_behaviour(status=202, body=b"queued", headers={"X-Receiver": "ok"})

    result = post(make_sender(https_receiver), https_receiver.url())

    assert result.succeeded
    assert (result.status_code, result.response_body, result.error) == (202, "queued", None)
    assert result.response_headers["X-Receiver"] == "ok"


def test_it_reports_a_500_as_a_failure_with_its_status(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    https_receiver.set_behaviour(status=500, body=b"boom")

    result = post(make_sender(https_receiver), https_receiver.url())

    assert not result.succeeded
    assert (result.status_code, result.response_body, result.error) == (500, "boom", None)


def test_it_does_not_follow_a_redirect(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    https_receiver.set_behaviour(redirect_to=https_receiver.url("/elsewhere"))

    result = post(make_sender(https_receiver), https_receiver.url())

    assert (result.status_code, result.error, result.succeeded) == (302, "redirect", False)
    assert [request.path for request in https_receiver.requests] == ["/hook"]


def test_it_times_out_when_the_receiver_hangs(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    https_receiver.set_behaviour(hang=True)

    result = post(make_sender(https_receiver, timeout=SHORT_TIMEOUT), https_receiver.url())

    assert (result.error, result.status_code) == ("timeout", None)
    assert 900 <= result.duration_ms < 2000


def test_it_times_out_when_the_body_trickles_past_the_deadline(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    https_receiver.set_behaviour(body=b"x" * 100, trickle_interval=0.05)  # 5 s in all

    result = post(make_sender(https_receiver, timeout=SHORT_TIMEOUT), https_receiver.url())

    assert result.error == "timeout"
    assert 900 <= result.duration_ms < 2000


def test_it_times_out_when_the_headers_trickle_past_the_deadline(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    https_receiver.set_behaviour(body=b"ok", trickle_interval=0.1, trickle_head=True)  # ~4.5 s

    result = post(make_sender(https_receiver, timeout=SHORT_TIMEOUT), https_receiver.url())

    assert (result.error, result.status_code) == ("timeout", None)
    assert 900 <= result.duration_ms < 2000


def test_it_stores_at_most_16_kib_of_the_response_body(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    https_receiver.set_behaviour(body=b"a" * 200 * 1024)

    result = post(make_sender(https_receiver), https_receiver.url())

    assert result.succeeded
    assert result.response_body == "a" * 16 * 1024


def test_it_stops_reading_an_endless_response_body(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    https_receiver.set_behaviour(stream_forever=True)

    result = post(make_sender(https_receiver), https_receiver.url())

    assert (result.succeeded, len(result.response_body)) == (True, 16 * 1024)
    assert result.duration_ms < 2000


def test_it_does_not_reuse_a_connection_left_with_unread_body(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    sender = make_sender(https_receiver)
    https_receiver.set_behaviour(path="/big", body=b"a" * 200 * 1024)
    post(sender, https_receiver.url("/big"))

    assert post(sender, https_receiver.url()).succeeded
    assert https_receiver.connections_accepted == 2


def test_it_stores_undecodable_bytes_and_nul_as_replacement_characters(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    https_receiver.set_behaviour(body=b"ok\xff\x00")

    result = post(make_sender(https_receiver), https_receiver.url())

    assert result.response_body == "ok\ufffd\ufffd"


def test_it_reports_a_tls_error_for_an_untrusted_certificate(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    result = post(make_sender(https_receiver, ca_bundle=None), https_receiver.url())

    assert (result.error, result.status_code) == ("tls_error", None)
    assert https_receiver.requests == []


def test_it_ignores_ca_bundle_environment_variables(
    https_receiver: HttpsReceiver, make_sender: SenderFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.setenv(variable, https_receiver.ca_pem_path)

    result = post(make_sender(https_receiver, ca_bundle=None), https_receiver.url())

    assert result.error == "tls_error"


def test_it_ignores_proxy_environment_variables(
    https_receiver: HttpsReceiver, make_sender: SenderFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(variable, "http://127.0.0.1:9")

    result = post(make_sender(https_receiver), https_receiver.url())

    assert result.succeeded
    assert len(https_receiver.requests) == 1


def test_it_reports_a_connection_error_when_nothing_listens(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]

    result = post(make_sender(https_receiver), f"https://localhost:{closed_port}/hook")

    assert (result.error, result.status_code) == ("connection_error", None)


def test_it_rejects_a_name_resolving_to_loopback_without_connecting(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    result = post(make_sender(https_receiver, allowed_networks=()), https_receiver.url())

    assert (result.error, result.status_code) == ("address_rejected", None)
    assert https_receiver.connections_accepted == 0
    assert https_receiver.requests == []


def test_it_rejects_when_any_resolved_address_is_not_allowed(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    resolver = RecordingResolver([LOOPBACK, ipaddress.IPv4Address("10.0.0.7")])

    result = post(make_sender(https_receiver, resolve=resolver), https_receiver.url())

    assert result.error == "address_rejected"
    assert https_receiver.connections_accepted == 0


@pytest.mark.parametrize("failure", [[], socket.gaierror(socket.EAI_NONAME, "unknown")])
def test_it_counts_a_name_that_does_not_resolve_as_a_retryable_connection_error(
    https_receiver: HttpsReceiver, make_sender: SenderFactory, failure: Any
) -> None:
    def resolve(host: str, port: int) -> list[IPAddress]:
        if isinstance(failure, Exception):
            raise failure
        return list(failure)

    result = post(make_sender(https_receiver, resolve=resolve), https_receiver.url())

    assert result.error == "connection_error"
    assert https_receiver.connections_accepted == 0


def test_it_sends_to_a_loopback_address_inside_allowed_networks(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    result = post(make_sender(https_receiver), https_receiver.url())

    assert result.succeeded
    assert len(https_receiver.requests) == 1


def test_it_applies_the_address_policy_to_resolved_addresses(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    checked: list[IPAddress] = []

    def allow(address: IPAddress) -> bool:
        checked.append(address)
        return address == LOOPBACK

    sender = make_sender(https_receiver, allowed_networks=(), address_allowed=allow)

    assert post(sender, https_receiver.url()).succeeded
    assert checked == [LOOPBACK]


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])
def test_it_checks_an_ip_literal_host_without_resolving(
    https_receiver: HttpsReceiver, make_sender: SenderFactory, host: str
) -> None:
    resolver = RecordingResolver([LOOPBACK])
    sender = make_sender(https_receiver, allowed_networks=(), resolve=resolver)

    result = post(sender, https_receiver.url(host=host))

    assert (result.error, resolver.calls) == ("address_rejected", [])


def test_it_connects_to_an_allowed_ip_literal_host(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    result = post(make_sender(https_receiver), https_receiver.url(host="127.0.0.1"))

    assert result.succeeded
    assert https_receiver.requests[0].header("Host") == f"127.0.0.1:{https_receiver.port}"


def test_it_pins_the_connection_to_the_checked_address(
    named_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    # NAME is under .test, so nothing but the injected resolver can turn it into an address.
    resolver = RecordingResolver([LOOPBACK])
    sender = make_sender(named_receiver, resolve=resolver)

    result = post(sender, named_receiver.url(host=NAME))

    assert result.succeeded
    assert resolver.calls == [(NAME, named_receiver.port)]


def test_it_keeps_the_name_for_host_header_and_sni(
    named_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    post(make_sender(named_receiver), named_receiver.url(host=NAME))

    (request,) = named_receiver.requests
    assert request.header("Host") == f"{NAME}:{named_receiver.port}"
    assert request.server_name == NAME


def test_it_verifies_the_certificate_against_the_url_name(
    named_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    result = post(make_sender(named_receiver), named_receiver.url(host="other.example.test"))

    assert result.error == "tls_error"
    assert named_receiver.requests == []


def test_it_checks_a_fresh_answer_on_every_attempt(
    named_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    resolver = RecordingResolver([LOOPBACK], [ipaddress.IPv4Address("169.254.169.254")])
    sender = make_sender(named_receiver, resolve=resolver)

    first, second = (post(sender, named_receiver.url(host=NAME)) for _ in range(2))

    assert (first.succeeded, second.error) == (True, "address_rejected")
    assert len(named_receiver.requests) == 1


def test_it_pins_to_an_ipv6_address(
    ipv6_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    sender = make_sender(
        ipv6_receiver,
        allowed_networks=(ipaddress.ip_network("::1/128"),),
        resolve=RecordingResolver([ipaddress.IPv6Address("::1")]),
    )

    assert post(sender, ipv6_receiver.url(host=NAME)).succeeded
    assert ipv6_receiver.requests[0].header("Host") == f"{NAME}:{ipv6_receiver.port}"


def test_it_falls_back_to_the_next_address_when_one_refuses(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    resolver = RecordingResolver([ipaddress.IPv4Address("127.0.0.2"), LOOPBACK])

    result = post(make_sender(https_receiver, resolve=resolver), https_receiver.url())

    assert result.succeeded


def test_it_reuses_one_connection_for_consecutive_sends(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    sender = make_sender(https_receiver)

    results = [post(sender, https_receiver.url()) for _ in range(3)]

    assert all(result.succeeded for result in results)
    assert len({request.client_port for request in https_receiver.requests}) == 1
    assert https_receiver.connections_accepted == 1


def test_it_can_be_shared_by_sender_threads(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    sender = make_sender(https_receiver, max_connections_per_host=8)
    results: list[AttemptResult] = []

    def work() -> None:
        results.extend(post(sender, https_receiver.url()) for _ in range(5))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [result.succeeded for result in results] == [True] * 40
    assert len(https_receiver.requests) == 40


def test_it_records_an_aware_utc_start_time(
    https_receiver: HttpsReceiver, make_sender: SenderFactory
) -> None:
    result = post(make_sender(https_receiver), https_receiver.url())

    assert result.started_at.utcoffset() == timedelta(0)


class ClosingListener:
    """Accepts TCP connections and closes each at once, as a dead pooled connection fails."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def closing_listener() -> Iterator[ClosingListener]:
    listener = ClosingListener()
    yield listener
    listener.close()


@pytest.mark.parametrize(("retry", "connections"), [(True, 2), (False, 1)])
def test_it_tries_once_more_at_once_after_a_fast_transport_failure(
    https_receiver: HttpsReceiver,
    make_sender: SenderFactory,
    closing_listener: ClosingListener,
    retry: bool,
    connections: int,
) -> None:
    sender = make_sender(https_receiver, retry_stale_connections=retry)

    result = post(sender, f"https://localhost:{closing_listener.port}/hook")

    assert result.error in {"connection_error", "tls_error"}
    assert closing_listener.connections == connections
