"""Withdrawing access reaches every carrier after commit, and only after commit."""

import pytest
from django.db import transaction

from gshost import withdrawals


@pytest.fixture
def carried(monkeypatch):
    heard = []
    monkeypatch.setattr(withdrawals, "_carriers", [heard.append])
    return heard


@pytest.mark.django_db(transaction=True)
def test_a_withdrawal_reaches_the_carriers_once_its_transaction_commits(carried):
    with transaction.atomic():
        withdrawals.withdraw_access(reason="suspended", server_ids=["srv_a"])
        assert carried == []

    assert [w.server_ids for w in carried] == [frozenset({"srv_a"})]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_withdrawal_reaches_no_carrier(carried):
    with pytest.raises(RuntimeError), transaction.atomic():
        withdrawals.withdraw_access(reason="suspended", server_ids=["srv_a"])
        raise RuntimeError("the write failed")

    assert carried == []


@pytest.mark.django_db(transaction=True)
def test_a_failing_carrier_keeps_the_others_from_nothing(monkeypatch):
    heard = []

    def failing(withdrawal):
        raise RuntimeError("a broken carrier")

    monkeypatch.setattr(withdrawals, "_carriers", [failing, heard.append])

    withdrawals.withdraw_access(reason="password changed", person_ids=[7])

    assert [w.person_ids for w in heard] == [frozenset({"7"})]
