"""This process's HTTPS client for webhook hosts: one ``WebhookSender`` (keep-alive pools, one
cached SSL context) built from the settings, rebuilt only when they change (in practice, in
tests), never one inherited across fork. Tests and the benchmark's worker replace
``sender_factory`` to resolve their receiver's name to loopback; in development the settings
do (``DEV_WEBHOOK_LOOPBACK_HOSTS``, see ``dev_loopback``). Both are process state, dropped by
``use_configured_sender``.
"""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from gshost import process_state
from webhooks.targets.transport import IPNetwork, Resolver, WebhookSender


@dataclass(frozen=True)
class SenderConfig:
    ca_bundle: str | None
    timeout: float
    allowed_networks: tuple[IPNetwork, ...]
    connections_per_host: int = 64

    @classmethod
    def from_settings(cls) -> SenderConfig:
        return cls(
            ca_bundle=settings.WEBHOOK_CA_BUNDLE,
            timeout=float(settings.WEBHOOK_TIMEOUT_SECONDS),
            allowed_networks=tuple(
                ipaddress.ip_network(network, strict=False)
                for network in settings.WEBHOOK_ALLOWED_NETWORKS
            ),
            connections_per_host=int(settings.WEBHOOK_SENDER_THREADS),
        )


def build_sender(config: SenderConfig, resolve: Resolver | None = None) -> WebhookSender:
    return WebhookSender(
        ca_bundle=config.ca_bundle,
        timeout=config.timeout,
        allowed_networks=config.allowed_networks,
        resolve=resolve,
        # As many keep-alive connections per (host, address) as attempts can be on the
        # network at once: a smaller pool discards connections (and urllib3 logs each one)
        # when many webhooks share a receiver host.
        max_connections_per_host=config.connections_per_host,
    )


SenderFactory = Callable[[SenderConfig], WebhookSender]

sender_factory: SenderFactory = build_sender

_sender_lock = threading.Lock()
_sender: tuple[tuple[object, ...], WebhookSender] | None = None


def get_sender() -> WebhookSender:
    """The process-wide sender for the current settings (never one inherited across fork)."""
    global _sender
    key = (
        os.getpid(),
        settings.WEBHOOK_CA_BUNDLE,
        settings.WEBHOOK_TIMEOUT_SECONDS,
        tuple(settings.WEBHOOK_ALLOWED_NETWORKS),
        settings.WEBHOOK_SENDER_THREADS,
        sender_factory,
    )
    current = _sender
    if current is not None and current[0] == key:
        return current[1]
    with _sender_lock:
        current = _sender
        if current is not None and current[0] == key:
            return current[1]
        sender = sender_factory(SenderConfig.from_settings())
        _sender = (key, sender)
    if current is not None and current[0][0] == os.getpid():
        current[1].close()
    return sender


def forget_sender() -> None:
    """Close the shared sender (tests, and process shutdown)."""
    global _sender
    with _sender_lock:
        current, _sender = _sender, None
    if current is not None and current[0][0] == os.getpid():
        current[1].close()


def configured_sender_factory() -> SenderFactory:
    """``build_sender``; in development, one that resolves the demo receiver's names to
    127.0.0.1 (``DEV_WEBHOOK_LOOPBACK_HOSTS``, empty unless DEBUG is on)."""
    if not settings.DEV_WEBHOOK_LOOPBACK_HOSTS:
        return build_sender
    from webhooks.targets.dev_loopback import loopback_sender_factory

    return loopback_sender_factory(
        frozenset(host.lower() for host in settings.DEV_WEBHOOK_LOOPBACK_HOSTS)
    )


def use_configured_sender() -> None:
    """Close the sender and build the next one with the factory the settings ask for."""
    global sender_factory
    forget_sender()
    sender_factory = configured_sender_factory()


process_state.register(
    "webhooks.sender",
    bound="one sender (a keep-alive pool per receiver address) and the factory that builds it",
    reset=use_configured_sender,
)
