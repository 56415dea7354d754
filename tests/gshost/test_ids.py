"""Identifiers: a prefix and uniformly random base62 characters, from the system's random source."""

import re

import pytest

from gshost import ids
from tests.base62 import base62


@pytest.fixture
def random_bytes(monkeypatch):
    """Make the random source hand out the given chunks, in order."""
    chunks: list[bytes] = []
    monkeypatch.setattr(ids.secrets, "token_bytes", lambda n: chunks.pop(0)[:n])
    return chunks


def test_new_id_is_the_prefix_and_20_base62_characters():
    assert re.fullmatch(r"srv_[0-9A-Za-z]{20}", ids.new_id("srv"))


def test_new_ids_makes_that_many_distinct_ids_of_the_same_shape():
    made = ids.new_ids("aud", 1000)
    assert len(set(made)) == 1000
    assert all(re.fullmatch(r"aud_[0-9A-Za-z]{20}", i) for i in made)


def test_new_ids_of_none_is_an_empty_list():
    assert ids.new_ids("aud", 0) == []


def test_random_base62_maps_a_byte_to_its_remainder_by_62(random_bytes):
    random_bytes.append(bytes([0, 61, 62, 123, 200, 247]))
    assert ids.random_base62(6) == "0z0zEz"


def test_random_base62_drops_bytes_from_248_up_so_no_character_is_favoured(random_bytes):
    random_bytes.append(bytes([248, 5, 255, 250, 7, 249]))
    assert ids.random_base62(2) == "57"


def test_random_base62_reads_again_when_too_few_bytes_were_kept(random_bytes):
    random_bytes.extend([bytes([1, 255] + [250] * 20), bytes([2, 3] + [251] * 20)])
    assert ids.random_base62(3) == "123"


@pytest.mark.parametrize("number", [0, 1, 61, 62, 3843, 3844, 3845, 2**32 - 1, 62**6, 10**30])
def test_to_base62_is_most_significant_digit_first_padded_with_zeros(number):
    assert ids.to_base62(number, 6) == base62(number).rjust(6, "0")
