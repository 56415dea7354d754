"""The bounded dictionary behind the per-process caches: past its size, the least recently
used entry goes."""

import pytest

from gshost.errors import Misuse
from gshost.lru import LruDict


def filled(*keys: str, max_size: int) -> LruDict[str, int]:
    entries: LruDict[str, int] = LruDict(max_size)
    for number, key in enumerate(keys):
        entries.put(key, number)
    return entries


def test_it_drops_the_oldest_entry_past_its_size():
    entries = filled("a", "b", "c", max_size=2)
    assert "a" not in entries
    assert (entries.get("b"), entries.get("c"), len(entries)) == (1, 2, 2)


def test_a_read_keeps_an_entry_longer():
    entries = filled("a", "b", max_size=2)
    entries.get("a")
    entries.put("c", 3)
    assert ("a" in entries, "b" in entries) == (True, False)


def test_writing_an_entry_again_keeps_it_longer():
    entries = filled("a", "b", max_size=2)
    entries.put("a", 10)
    entries.put("c", 3)
    assert (entries.get("a"), "b" in entries) == (10, False)


def test_an_absent_entry_is_none_and_popping_it_is_harmless():
    entries = filled("a", max_size=2)
    entries.pop("z")
    assert (entries.get("z"), len(entries)) == (None, 1)


def test_it_refuses_a_size_below_one():
    with pytest.raises(Misuse):
        LruDict(0)
