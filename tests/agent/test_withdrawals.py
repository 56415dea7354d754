"""The agent's record of withdrawn access: what a withdrawal covers, and what it refuses."""

import pytest

from gshost_agent.withdrawals import Withdrawal, WithdrawalInvalid, Withdrawals


def test_a_suspension_covers_every_session_on_its_server_alone():
    suspended = Withdrawal(reason="suspended", server_ids=frozenset({"srv_a"}))

    assert suspended.covers(server_id="srv_a", key_id="k1")
    assert suspended.covers(server_id="srv_a", person_id=7)
    assert not suspended.covers(server_id="srv_b", key_id="k1")


def test_a_password_change_covers_the_person_on_every_server_and_no_one_else():
    changed = Withdrawal(reason="password changed", person_ids=frozenset({"7"}))

    assert changed.covers(server_id="srv_a", person_id=7)
    assert changed.covers(server_id="srv_b", person_id="7")
    assert not changed.covers(server_id="srv_a", person_id=8)
    assert not changed.covers(server_id="srv_a", key_id="7")


def test_a_membership_removed_covers_the_person_on_the_organizations_servers_only():
    removed = Withdrawal(
        reason="membership removed", server_ids=frozenset({"srv_a"}), person_ids=frozenset({"7"})
    )

    assert removed.covers(server_id="srv_a", person_id=7)
    assert not removed.covers(server_id="srv_b", person_id=7)
    assert not removed.covers(server_id="srv_a", person_id=8)


def test_a_withdrawal_naming_nothing_is_refused():
    with pytest.raises(WithdrawalInvalid):
        Withdrawal(reason="nothing")


def test_a_withdrawal_survives_its_round_trip():
    sent = Withdrawal(reason="key revoked", key_ids=frozenset({"abcd1234"}), at=1_700_000_000.5)

    assert Withdrawal.from_json(sent.to_json()) == sent


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"server_ids": ["srv_a"]},
        {"reason": "", "server_ids": ["srv_a"]},
        {"reason": "x", "server_ids": "srv_a"},
        {"reason": "x", "server_ids": [None]},
        {"reason": "x", "server_ids": ["srv_a"], "at": "now"},
        {"reason": "x"},
    ],
)
def test_a_malformed_withdrawal_is_refused(body):
    with pytest.raises(WithdrawalInvalid):
        Withdrawal.from_json(body)


def test_a_credential_issued_before_a_withdrawal_that_covers_it_is_refused():
    withdrawals = Withdrawals(clock=lambda: 1000.0)
    withdrawals.add(Withdrawal(reason="key revoked", key_ids=frozenset({"k1"}), at=1000.0))

    assert withdrawals.refuses(server_id="srv_a", key_id="k1", issued_at=999.0)
    assert not withdrawals.refuses(server_id="srv_a", key_id="k2", issued_at=999.0)


def test_a_credential_issued_after_the_withdrawal_is_accepted():
    withdrawals = Withdrawals(clock=lambda: 1000.0)
    withdrawals.add(Withdrawal(reason="suspended", server_ids=frozenset({"srv_a"}), at=1000.0))

    assert not withdrawals.refuses(server_id="srv_a", key_id="k1", issued_at=1001.0)


def test_a_withdrawal_older_than_a_day_is_forgotten():
    now = [1000.0]
    withdrawals = Withdrawals(clock=lambda: now[0])
    withdrawals.add(Withdrawal(reason="suspended", server_ids=frozenset({"srv_a"}), at=1000.0))
    now[0] += 24 * 3600 + 1
    withdrawals.add(Withdrawal(reason="other", server_ids=frozenset({"srv_b"}), at=now[0]))

    assert not withdrawals.refuses(server_id="srv_a", issued_at=0.0)


def test_every_listener_hears_of_a_withdrawal_even_when_one_fails():
    withdrawals = Withdrawals()
    heard = []

    def failing(withdrawal):
        raise RuntimeError("a broken listener")

    withdrawals.subscribe(failing)
    withdrawals.subscribe(heard.append)
    sent = Withdrawal(reason="suspended", server_ids=frozenset({"srv_a"}))
    withdrawals.add(sent)

    assert heard == [sent]


def test_an_unsubscribed_listener_hears_nothing_more():
    withdrawals = Withdrawals()
    heard = []
    unsubscribe = withdrawals.subscribe(heard.append)
    unsubscribe()

    withdrawals.add(Withdrawal(reason="suspended", server_ids=frozenset({"srv_a"})))

    assert heard == []
