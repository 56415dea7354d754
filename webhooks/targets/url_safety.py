"""Static SSRF checks for webhook target URLs.

``check_webhook_url`` decides, without any DNS lookup, whether a URL may be stored as a
webhook target, and tells the sender which host and port to connect to. Names are resolved
at send time elsewhere; the sender must apply ``is_public_ip`` to every resolved address.

The rules are checked in this order and the first failure is the reason:

1. ``malformed_url``: not ``scheme://authority...``; whitespace, backslash or a control
   character anywhere; userinfo (any ``@`` in the authority); a bad port (non-digits, empty,
   0 or above 65535); a bad ``[...]`` literal; a host that fails percent-decoding, UTS46 /
   IDNA processing, or contains anything but ``[a-z0-9_-]`` labels once converted to ASCII.
2. ``https_required``: the scheme is not ``https`` (case-insensitive).
3. ``empty_host``: the authority has no host.
4. ``private_address``: the host is a non-public IP address, an IPv4 address spelled other
   than as a canonical dotted quad, a single-label name, or a name under a non-public suffix.

Where the contract leaves room, this module chooses:

- a zone id (``[fe80::1%25eth0]``) is private_address on a link-local address and
  malformed_url anywhere else;
- a host whose last label is a number (WHATWG's "ends in a number") is an IPv4 address, and
  anything but a literal canonical dotted quad is private_address even when WHATWG would
  reject it (``256.1.1.1``, ``1.2.3.4.5``) or it spells a public address (``8.8.8.8.``);
- IPv4-compatible ``::a.b.c.d``, local-use NAT64 ``64:ff9b:1::/48`` and Teredo are refused
  whatever they embed; mapped, NAT64 ``64:ff9b::/96`` and 6to4 forms follow the embedded IPv4.

The URL itself is never rewritten: the caller stores what the user gave.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from typing import Final
from urllib.parse import quote, unquote_to_bytes

import idna

from gshost_agent.addresses import (
    NON_PUBLIC_IPV4_NETWORKS,
    NON_PUBLIC_IPV6_NETWORKS,
    NON_PUBLIC_SUFFIXES,
    IPAddress,
    is_public_ip,
)
from webhooks.errors import UnsafeWebhookUrl

__all__ = [
    "NON_PUBLIC_IPV4_NETWORKS",
    "NON_PUBLIC_IPV6_NETWORKS",
    "NON_PUBLIC_SUFFIXES",
    "CheckedUrl",
    "UnsafeWebhookUrl",
    "UrlRejection",
    "check_webhook_url",
    "is_public_ip",
    "parse_webhook_url",
]


class UrlRejection(StrEnum):
    MALFORMED_URL = "malformed_url"
    HTTPS_REQUIRED = "https_required"
    EMPTY_HOST = "empty_host"
    PRIVATE_ADDRESS = "private_address"


@dataclass(frozen=True)
class CheckedUrl:
    """Where a request for the URL goes: what the sender connects to and what it asks for."""

    host: str  # lower-case ASCII (IDNA) name, or the IP address without brackets
    port: int  # the explicit port, else 443
    ip: IPAddress | None  # set when the host is an IP literal
    request_target: str = "/"  # path and query, re-quoted; never the fragment

    @property
    def host_header(self) -> str:
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port == _DEFAULT_PORT else f"{name}:{self.port}"


_SCHEME_RE: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)")
_AUTHORITY_END_RE: Final = re.compile(r"[/?#]")
_PORT_RE: Final = re.compile(r"[0-9]+")
_IPV6_BODY_RE: Final = re.compile(r"[0-9A-Fa-f:.]+")
_ZONE_ID_RE: Final = re.compile(r"[A-Za-z0-9._~-]+")
_LABEL_RE: Final = re.compile(r"[a-z0-9_-]+")
_NUMERIC_LABEL_RE: Final = re.compile(r"[0-9]+|0x[0-9a-f]*")
_CANONICAL_OCTET: Final = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_CANONICAL_IPV4_RE: Final = re.compile(rf"{_CANONICAL_OCTET}(?:\.{_CANONICAL_OCTET}){{3}}")
_DEFAULT_PORT: Final = 443
# Characters left as they are when re-quoting the request target (as requests does).
_SAFE_TARGET_CHARS: Final = "!$%&'()*+,/:;=?@[]~"
_MAX_NAME_LENGTH: Final = 253
_MAX_LABEL_LENGTH: Final = 63


@dataclass(frozen=True)
class _Host:
    name: str  # normalised; "" when the authority has no host
    ip: IPAddress | None = None
    odd_ipv4: bool = False  # an IPv4 address not spelled as a canonical dotted quad


@dataclass(frozen=True)
class _ParsedUrl:
    scheme: str
    host: _Host
    port: int
    request_target: str


def check_webhook_url(url: str) -> CheckedUrl:
    """Return where to connect for ``url``, or raise ``UnsafeWebhookUrl``."""
    parsed = _parse_url(url)
    if parsed.scheme != "https":
        raise _reject(UrlRejection.HTTPS_REQUIRED, "the URL must use https://")
    if not parsed.host.name:
        raise _reject(UrlRejection.EMPTY_HOST, "the URL has no host")
    _check_destination(parsed.host)
    return _checked(parsed)


def parse_webhook_url(url: str) -> CheckedUrl:
    """Rule 1 only: where ``url`` points, whatever the destination (raises for a malformed
    URL). For tests of the transport against loopback; deliveries use ``check_webhook_url``."""
    return _checked(_parse_url(url))


def _checked(parsed: _ParsedUrl) -> CheckedUrl:
    return CheckedUrl(
        host=parsed.host.name,
        port=parsed.port,
        ip=parsed.host.ip,
        request_target=parsed.request_target,
    )


def _reject(reason: UrlRejection, message: str) -> UnsafeWebhookUrl:
    return UnsafeWebhookUrl(reason, message)


def _malformed(message: str) -> UnsafeWebhookUrl:
    return UnsafeWebhookUrl(UrlRejection.MALFORMED_URL, message)


def _private(message: str) -> UnsafeWebhookUrl:
    return UnsafeWebhookUrl(UrlRejection.PRIVATE_ADDRESS, message)


# --- rule 1: parsing ------------------------------------------------------------------------


def _parse_url(url: str) -> _ParsedUrl:
    if not isinstance(url, str):
        raise _malformed("the URL must be a string")
    _reject_bad_characters(url)
    match = _SCHEME_RE.fullmatch(url)
    if match is None or not match.group(2).startswith("//"):
        raise _malformed("the URL must be absolute, of the form https://host/path")
    after_scheme = match.group(2)[2:]
    authority = _AUTHORITY_END_RE.split(after_scheme, maxsplit=1)[0]
    if "@" in authority:
        raise _malformed("the URL must not contain a user name or password")
    host_text, port_text = _split_authority(authority)
    port = _parse_port(port_text)
    host = _parse_host(host_text)
    target = _request_target(after_scheme[len(authority) :])
    return _ParsedUrl(scheme=match.group(1).lower(), host=host, port=port, request_target=target)


def _request_target(rest: str) -> str:
    """Path and query of what follows the authority, quoted for the request line."""
    target = rest.partition("#")[0]
    if not target.startswith("/"):
        target = "/" + target  # "https://host" and "https://host?q" ask for the root
    return quote(target, safe=_SAFE_TARGET_CHARS)


def _reject_bad_characters(url: str) -> None:
    for char in url:
        if char == "\\" or char.isspace() or unicodedata.category(char) == "Cc":
            raise _malformed("the URL contains whitespace, a backslash or a control character")


def _split_authority(authority: str) -> tuple[str, str | None]:
    """Split ``host[:port]``; the port is None when there is no colon at all."""
    if authority.startswith("["):
        end = authority.find("]")
        if end == -1:
            raise _malformed("unterminated [ in the host")
        host, rest = authority[: end + 1], authority[end + 1 :]
        if rest and not rest.startswith(":"):
            raise _malformed("unexpected text after the ] of an IPv6 address")
        return host, (rest[1:] if rest else None)
    host, colon, port = authority.partition(":")
    return host, (port if colon else None)


def _parse_port(text: str | None) -> int:
    if text is None:
        return 443
    if not _PORT_RE.fullmatch(text):
        raise _malformed("the port must be a number")
    port = int(text)
    if not 0 < port <= 65535:
        raise _malformed("the port must be between 1 and 65535")
    return port


def _parse_host(text: str) -> _Host:
    if not text:
        return _Host(name="")
    if text.startswith("["):
        return _parse_ipv6_literal(text[1:-1])
    return _parse_name(text)


def _parse_ipv6_literal(body: str) -> _Host:
    # A zone id (RFC 6874, "%25" then the zone) only makes sense on a link-local address;
    # such a host parses and is then refused as private_address. Any other zone is malformed.
    address_text, has_zone, zone = body.partition("%25")
    if not _IPV6_BODY_RE.fullmatch(address_text):
        raise _malformed("invalid IPv6 address in brackets")
    if has_zone and not _ZONE_ID_RE.fullmatch(zone):
        raise _malformed("invalid IPv6 zone id")
    try:
        ip = ipaddress.IPv6Address(address_text)
    except ValueError:
        raise _malformed("invalid IPv6 address in brackets") from None
    if has_zone:
        if not ip.is_link_local:
            raise _malformed("an IPv6 zone id is only valid on a link-local address")
        ip = ipaddress.IPv6Address(f"{address_text}%{zone}")
    return _Host(name=str(ip), ip=ip)


def _parse_name(text: str) -> _Host:
    labels = _domain_to_ascii(_percent_decode(text)).split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()  # one trailing dot is the same name
    if _NUMERIC_LABEL_RE.fullmatch(labels[-1]):
        return _numeric_host(text, labels)
    _check_dns_syntax(labels)
    return _Host(name=".".join(labels))


def _percent_decode(text: str) -> str:
    if "%" not in text:
        return text
    try:
        return unquote_to_bytes(text).decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed("the host is not valid UTF-8 once percent-decoded") from None


def _domain_to_ascii(text: str) -> str:
    """WHATWG "domain to ASCII": UTS46 mapping (no STD3 rules), then IDNA for each label."""
    lowered = text.lower()
    if lowered.isascii() and not any(label.startswith("xn--") for label in lowered.split(".")):
        return lowered
    try:
        mapped = idna.uts46_remap(text, std3_rules=False, transitional=False)
        return ".".join(_label_to_ascii(label) for label in mapped.split("."))
    except (idna.IDNAError, UnicodeError, ValueError):
        raise _malformed("the host is not a valid internationalised domain name") from None


def _label_to_ascii(label: str) -> str:
    if not label.isascii():
        return idna.alabel(label).decode("ascii")
    if label.startswith("xn--"):
        idna.ulabel(label)  # validates the Punycode and the label it decodes to
    return label


def _check_dns_syntax(labels: list[str]) -> None:
    if any(not _LABEL_RE.fullmatch(label) for label in labels):
        raise _malformed("the host contains an empty label or a character not allowed in DNS")
    if any(len(label) > _MAX_LABEL_LENGTH for label in labels):
        raise _malformed("a label of the host is longer than 63 characters")
    if len(".".join(labels)) > _MAX_NAME_LENGTH:
        raise _malformed("the host is longer than 253 characters")


def _numeric_host(raw_text: str, labels: list[str]) -> _Host:
    # WHATWG parses a host whose last label is a number as IPv4, in decimal, octal or hex and
    # with 1 to 4 parts. Only the canonical dotted quad, written literally, is accepted as an
    # address; every other spelling (public or not, valid or not) is refused in rule 4.
    name = ".".join(labels)
    if _CANONICAL_IPV4_RE.fullmatch(raw_text):
        ip = ipaddress.IPv4Address(raw_text)
        return _Host(name=str(ip), ip=ip)
    if any(not _LABEL_RE.fullmatch(label) for label in labels):
        raise _malformed("the host contains an empty label or a character not allowed in DNS")
    return _Host(name=name, odd_ipv4=True)


# --- rule 4: destination --------------------------------------------------------------------


def _check_destination(host: _Host) -> None:
    if host.odd_ipv4:
        raise _private("an IPv4 address must be written as a plain dotted quad (a.b.c.d)")
    if host.ip is not None:
        if not is_public_ip(host.ip):
            raise _private(f"{host.ip} is not a public address")
        return
    labels = host.name.split(".")
    suffixes = {".".join(labels[index:]) for index in range(len(labels))}
    if suffixes & NON_PUBLIC_SUFFIXES:
        raise _private(f"{host.name!r} is a non-public domain name")
    if len(labels) < 2:
        raise _private(f"{host.name!r} is a single-label name, not a public host")
