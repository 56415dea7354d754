"""How many rows of one webhook a process holds at once (``engine.InFlight``)."""

from __future__ import annotations

from datetime import UTC, datetime

from webhooks.delivery.claims import Claim
from webhooks.delivery.engine import InFlight
from webhooks.delivery.policy import DeliveryState

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def _claim(delivery_id: str, webhook_id: str) -> Claim:
    return Claim(
        delivery_id=delivery_id,
        webhook_id=webhook_id,
        url="https://hook.example.com/",
        encrypted_secret="",
        encrypted_previous_secret="",
        previous_secret_expires_at=None,
        event="server.started",
        body="{}",
        lease_expires_at=NOW,
        redelivery_requested_at=None,
        created_at=NOW,
        first_attempt_at=NOW,
        state=DeliveryState("pending", NOW, 0, "", None),
    )


def test_a_webhook_that_has_not_answered_here_gets_one_row_at_a_time() -> None:
    in_flight = InFlight(per_webhook=4)
    taken = [_claim(f"dlv_{n}", "whk_new") for n in range(3)]

    kept, over = in_flight.admit(taken)

    assert [claim.delivery_id for claim in kept] == ["dlv_0"]
    assert [claim.delivery_id for claim in over] == ["dlv_1", "dlv_2"]


def test_a_webhook_that_answered_gets_up_to_its_limit() -> None:
    in_flight = InFlight(per_webhook=4)
    in_flight.admit([_claim("dlv_first", "whk_live")])
    in_flight.finish("whk_live", answered=True)

    kept, over = in_flight.admit([_claim(f"dlv_{n}", "whk_live") for n in range(6)])

    assert len(kept) == 4
    assert len(over) == 2
    assert in_flight.full() == ["whk_live"]


def test_a_webhook_whose_last_attempt_went_unanswered_is_back_to_one_row() -> None:
    in_flight = InFlight(per_webhook=4)
    in_flight.admit([_claim("dlv_first", "whk_dying")])
    in_flight.finish("whk_dying", answered=True)
    in_flight.admit([_claim("dlv_second", "whk_dying")])
    in_flight.finish("whk_dying", answered=False)

    kept, _over = in_flight.admit([_claim(f"dlv_{n}", "whk_dying") for n in range(3)])

    assert len(kept) == 1
