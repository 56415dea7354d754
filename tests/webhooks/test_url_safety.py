"""Pure tests for webhooks.targets.url_safety: no database, no Django settings, no network."""

from __future__ import annotations

import ipaddress
import socket
from collections import Counter

import pytest

from tests.webhooks.ssrf_payloads import ACCEPTED, ALL_CASES
from webhooks.targets.url_safety import (
    NON_PUBLIC_SUFFIXES,
    CheckedUrl,
    UnsafeWebhookUrl,
    UrlRejection,
    check_webhook_url,
    is_public_ip,
)

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address


def _outcome(url: str) -> str | None:
    try:
        check_webhook_url(url)
    except UnsafeWebhookUrl as exc:
        return exc.reason.value
    return None


@pytest.mark.parametrize(
    ("url", "expected"),
    [pytest.param(url, expected, id=case_id) for case_id, url, expected in ALL_CASES],
)
def test_payload_table(url: str, expected: str | None) -> None:
    assert _outcome(url) == expected


def test_payload_ids_are_unique() -> None:
    counts = Counter(case_id for case_id, _, _ in ALL_CASES)
    assert [case_id for case_id, count in counts.items() if count > 1] == []


def test_payload_table_covers_every_reason() -> None:
    counts = Counter(expected for _, _, expected in ALL_CASES)
    assert set(counts) == {None, *(reason.value for reason in UrlRejection)}
    assert len(ALL_CASES) >= 150


def test_reason_strings_match_the_contract() -> None:
    assert [reason.value for reason in UrlRejection] == [
        "malformed_url",
        "https_required",
        "empty_host",
        "private_address",
    ]
    assert f"{UrlRejection.PRIVATE_ADDRESS}" == "private_address"


def test_exception_carries_reason_and_message() -> None:
    with pytest.raises(UnsafeWebhookUrl) as caught:
        check_webhook_url("https://127.0.0.1/")
    assert caught.value.reason is UrlRejection.PRIVATE_ADDRESS
    assert isinstance(caught.value.reason, str)
    assert str(caught.value)
    assert caught.value.message == str(caught.value)


def test_exception_constructor() -> None:
    exc = UnsafeWebhookUrl(UrlRejection.EMPTY_HOST, "no host")
    assert exc.reason is UrlRejection.EMPTY_HOST
    assert str(exc) == "no host"


@pytest.mark.parametrize("value", [None, b"https://example.com/", 42])
def test_non_string_input_is_malformed(value: object) -> None:
    with pytest.raises(UnsafeWebhookUrl) as caught:
        check_webhook_url(value)  # type: ignore[arg-type]
    assert caught.value.reason is UrlRejection.MALFORMED_URL


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com/hook", CheckedUrl("example.com", 443, None, "/hook")),
        ("https://EXAMPLE.com:8443/x?y=1#frag", CheckedUrl("example.com", 8443, None, "/x?y=1")),
        ("https://example.com./", CheckedUrl("example.com", 443, None)),
        ("https://example.com:00443/", CheckedUrl("example.com", 443, None)),
        ("https://bücher.de/", CheckedUrl("xn--bcher-kva.de", 443, None)),
        ("https://XN--BCHER-KVA.de/", CheckedUrl("xn--bcher-kva.de", 443, None)),
        ("https://ⓔⓧⓐⓜⓟⓛⓔ.ⓒⓞⓜ/", CheckedUrl("example.com", 443, None)),
        ("https://example。com/", CheckedUrl("example.com", 443, None)),
        ("https://8.8.8.8/", CheckedUrl("8.8.8.8", 443, V4("8.8.8.8"))),
        ("https://1.1.1.1:8443/", CheckedUrl("1.1.1.1", 8443, V4("1.1.1.1"))),
        (
            "https://[2606:4700:0::1111]:8443/",
            CheckedUrl("2606:4700::1111", 8443, V6("2606:4700::1111")),
        ),
        (
            "https://[2A00:1450:4001:80B::200E]/",
            CheckedUrl("2a00:1450:4001:80b::200e", 443, V6("2a00:1450:4001:80b::200e")),
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_checked_url_for_the_sender(url: str, expected: CheckedUrl) -> None:
    assert check_webhook_url(url) == expected


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("https://example.com", "/"),
        ("https://example.com?a=1", "/?a=1"),
        ("https://example.com/a b/ü?q=ä#frag", "/a%20b/%C3%BC?q=%C3%A4"),
        ("https://example.com/p%20q?x=%2F", "/p%20q?x=%2F"),
    ],
)
def test_it_gives_the_sender_the_request_target_without_the_fragment(url: str, target: str) -> None:
    assert check_webhook_url(url.replace(" ", "%20")).request_target == target.replace(" ", "%20")


def test_checked_url_is_frozen() -> None:
    checked = check_webhook_url("https://example.com/")
    with pytest.raises(AttributeError):
        checked.port = 80  # type: ignore[misc]


def test_no_dns_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("url_safety must not resolve names")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "gethostbyname", refuse)
    for _, url, _ in ACCEPTED:
        check_webhook_url(url)


@pytest.mark.parametrize("suffix", sorted(NON_PUBLIC_SUFFIXES))
def test_every_listed_suffix_is_refused(suffix: str) -> None:
    for url in (f"https://{suffix}/", f"https://host.{suffix}/", f"https://A.{suffix.upper()}./"):
        assert _outcome(url) == "private_address", url


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("8.8.8.8", True),
        ("1.1.1.1", True),
        ("93.184.215.14", True),
        ("223.255.255.254", True),
        ("0.0.0.0", False),
        ("0.255.255.255", False),
        ("10.1.2.3", False),
        ("100.64.0.0", False),
        ("100.100.100.200", False),
        ("127.0.0.1", False),
        ("127.255.255.254", False),
        ("169.254.169.254", False),
        ("169.254.170.2", False),
        ("172.16.0.1", False),
        ("192.0.0.9", False),
        ("192.0.0.192", False),
        ("192.0.2.1", False),
        ("192.88.99.1", False),
        ("192.168.255.255", False),
        ("198.18.0.0", False),
        ("198.51.100.7", False),
        ("203.0.113.7", False),
        ("224.0.0.251", False),
        ("232.1.1.1", False),
        ("239.255.255.250", False),
        ("240.0.0.1", False),
        ("255.255.255.255", False),
    ],
)
def test_is_public_ipv4(address: str, expected: bool) -> None:
    assert is_public_ip(V4(address)) is expected


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("2606:4700::1111", True),
        ("2001:4860:4860::8888", True),
        ("2a00:1450:4001:80b::200e", True),
        ("::ffff:8.8.8.8", True),
        ("64:ff9b::8.8.8.8", True),
        ("2002:808:808::1", True),
        ("::", False),
        ("::1", False),
        ("::8.8.8.8", False),
        ("::127.0.0.1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:169.254.169.254", False),
        ("::ffff:10.0.0.1", False),
        ("::ffff:224.0.0.1", False),
        ("::ffff:0:8.8.8.8", False),
        ("64:ff9b::127.0.0.1", False),
        ("64:ff9b::10.0.0.1", False),
        ("64:ff9b::a9fe:a9fe", False),
        ("64:ff9b:1::8.8.8.8", False),
        ("64:ff9b:0:0:1::808:808", False),
        ("2002:7f00:1::", False),
        ("2002:a9fe:a9fe::", False),
        ("2002:c0a8:101::1", False),
        ("2002:e000:1::", False),
        ("2001::1", False),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False),
        ("2001:2::1", False),
        ("2001:10::1", False),
        ("2001:20::1", False),
        ("2001:db8::1", False),
        ("3fff::1", False),
        ("100::1", False),
        ("5f00::1", False),
        ("fc00::1", False),
        ("fd00:ec2::254", False),
        ("fe80::1", False),
        ("fe80::1%eth0", False),
        ("fec0::1", False),
        ("ff02::1", False),
        ("ff0e::1", False),
        ("4000::1", False),
        ("e000::1", False),
    ],
)
def test_is_public_ipv6(address: str, expected: bool) -> None:
    assert is_public_ip(V6(address)) is expected


@pytest.mark.parametrize("address", ["224.0.0.1", "ff0e::1", "64:ff9b::7f00:1", "2002:7f00:1::"])
def test_is_public_ip_refuses_what_is_global_accepts(address: str) -> None:
    ip = ipaddress.ip_address(address)
    assert ip.is_global  # the stdlib says global, the deny list says otherwise
    assert is_public_ip(ip) is False
