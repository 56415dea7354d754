"""A webhook send (a delivery's attempt or the test ping, both `send_signed`) inside
`transaction.atomic` is refused before any request leaves; outside one it is sent."""

import pytest
from django.db import transaction

from gshost.errors import CalledInsideTransaction
from tests.webhooks.delivery_fixtures import Hooks
from tests.webhooks.receiver import HttpsReceiver
from webhooks.targets.signed import send_ping, send_signed


def test_a_ping_inside_a_transaction_raises_and_sends_nothing(
    hooks: Hooks, receiver: HttpsReceiver
):
    webhook = hooks.webhook()

    with pytest.raises(CalledInsideTransaction, match="webhook send"), transaction.atomic():
        send_ping(webhook)

    assert receiver.requests == []


def test_a_signed_send_inside_a_transaction_raises_and_sends_nothing(
    hooks: Hooks, receiver: HttpsReceiver
):
    webhook = hooks.webhook()

    with pytest.raises(CalledInsideTransaction), transaction.atomic():
        send_signed(webhook, b"{}", "dlv_inside")

    assert receiver.requests == []


def test_a_ping_outside_a_transaction_is_sent(hooks: Hooks, receiver: HttpsReceiver):
    receiver.set_behaviour(status=200, body=b"pong")
    webhook = hooks.webhook()

    assert send_ping(webhook).succeeded
    assert len(receiver.requests) == 1
