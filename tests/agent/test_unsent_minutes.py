"""Which completed minutes of each server a heartbeat carries (``UnsentMinutes``): the means of
its samples per whole UTC minute, each until the control plane has acknowledged it, and never
more than the last hour."""

from __future__ import annotations

from pathlib import Path

import pytest

from gshost_agent.protocol import Minute, format_time
from gshost_agent.readings import Sample, SampleStore, UnsentMinutes

SERVER = "srv_unit0001"
TEN_O_CLOCK = 1_795_687_200.0  # 2026-11-26T10:00:00Z


@pytest.fixture
def store(tmp_path: Path) -> SampleStore:
    return SampleStore(tmp_path / f"{SERVER}.jsonl")


def sampled(store: SampleStore, minute: int, *values: tuple[float, float, int]) -> None:
    """Samples 10 s apart from minute `minute` after ten o'clock."""
    for n, (cpu, memory, players) in enumerate(values):
        store.add(Sample(TEN_O_CLOCK + minute * 60 + n * 10, cpu, memory, players))


def ats(pending_minutes: list[Minute]) -> list[str]:
    return [format_time(minute.at) for minute in pending_minutes]


def test_it_carries_the_means_of_each_completed_minute(store: SampleStore) -> None:
    sampled(store, 0, (1.0, 100.0, 0), (2.0, 101.0, 1), (4.0, 102.0, 1))
    sampled(store, 1, (5.0, 200.0, 2))
    pending = UnsentMinutes().pending({SERVER: store}, TEN_O_CLOCK + 90)
    assert {server: [m.to_json() for m in sent] for server, sent in pending.minutes.items()} == {
        SERVER: [
            {"at": "2026-11-26T10:00:00Z", "cpu_percent": 2.3, "memory_mb": 101.0,
             "players_online": 1},
        ]
    }  # fmt: skip


def test_a_minute_acknowledged_is_not_carried_again(store: SampleStore) -> None:
    unsent = UnsentMinutes()
    sampled(store, 0, (1.0, 100.0, 0))
    unsent.acknowledge(unsent.pending({SERVER: store}, TEN_O_CLOCK + 65))
    sampled(store, 1, (2.0, 100.0, 0))
    assert unsent.pending({SERVER: store}, TEN_O_CLOCK + 75).minutes == {}
    later = unsent.pending({SERVER: store}, TEN_O_CLOCK + 125)
    assert ats(later.minutes[SERVER]) == ["2026-11-26T10:01:00Z"]


def test_minutes_not_acknowledged_are_carried_again(store: SampleStore) -> None:
    unsent = UnsentMinutes()
    sampled(store, 0, (1.0, 100.0, 0))
    unsent.pending({SERVER: store}, TEN_O_CLOCK + 65)  # its heartbeat was not answered 200
    sampled(store, 1, (2.0, 100.0, 0))
    again = unsent.pending({SERVER: store}, TEN_O_CLOCK + 125)
    assert ats(again.minutes[SERVER]) == ["2026-11-26T10:00:00Z", "2026-11-26T10:01:00Z"]


def test_at_most_the_last_hour_is_carried(store: SampleStore) -> None:
    for minute in range(90):
        sampled(store, minute, (1.0, 100.0, 0))
    pending = UnsentMinutes().pending({SERVER: store}, TEN_O_CLOCK + 90 * 60 + 5)
    carried = ats(pending.minutes[SERVER])
    assert len(carried) == 60
    assert (carried[0], carried[-1]) == ("2026-11-26T10:30:00Z", "2026-11-26T11:29:00Z")


def test_a_server_without_samples_carries_none(store: SampleStore) -> None:
    assert UnsentMinutes().pending({SERVER: store}, TEN_O_CLOCK + 65).minutes == {}
