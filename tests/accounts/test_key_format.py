"""The key string, checked against the contract with an independent implementation of the rule:
`gsk_` + key id (8 base62) + `_` + secret (43 base62), the secret's last 6 characters the
CRC32 (zlib) of everything before them, in base62, most significant digit first, padded with 0.
"""

import re
import zlib

import pytest

from accounts import keys
from accounts.models import ApiKey
from tests.base62 import base62
from tests.conftest import API, client_for, error_of

SHAPE = re.compile(r"gsk_[0-9A-Za-z]{8}_[0-9A-Za-z]{43}")


def expected_checksum(body: str) -> str:
    return base62(zlib.crc32(body.encode("utf-8"))).rjust(6, "0")


def scanner_accepts(candidate: str) -> bool:
    """What an offline secret scanner would do with a string it found."""
    return SHAPE.fullmatch(candidate) is not None and candidate[-6:] == expected_checksum(
        candidate[:-6]
    )


def with_char_replaced(text: str, index: int) -> str:
    replacement = "a" if text[index] != "a" else "b"
    return text[:index] + replacement + text[index + 1 :]


def test_it_mints_56_character_keys(make_key):
    key = make_key()
    assert len(key.full_key) == 56


def test_it_mints_keys_of_the_contract_shape(make_key):
    key = make_key()
    assert SHAPE.fullmatch(key.full_key), key.full_key


def test_it_puts_the_key_id_between_the_prefix_and_the_secret(make_key):
    key = make_key()
    assert key.full_key[:4] == "gsk_"
    assert key.full_key[4:12] == key.key_id
    assert key.full_key[12] == "_"


def test_it_ends_the_secret_with_the_crc32_of_everything_before_it(make_key):
    key = make_key()
    assert key.full_key[-6:] == expected_checksum(key.full_key[:50])


def test_the_checksum_covers_prefix_key_id_and_first_37_secret_characters(make_key):
    key = make_key()
    body = f"gsk_{key.key_id}_{key.full_key[13:50]}"
    assert body == key.full_key[:-6]
    assert key.full_key[-6:] == expected_checksum(body)


def test_it_left_pads_small_checksums_with_zeros():
    # About one CRC32 in five is below 62**5 and needs padding; draw until we meet one.
    for _ in range(2000):
        full_key = keys.new_key_string(keys.new_key_id())
        if zlib.crc32(full_key[:-6].encode()) < 62**5:
            break
    else:
        pytest.fail("no key with a small checksum in 2000 draws")
    assert full_key[-6] == "0"
    assert full_key[-6:] == expected_checksum(full_key[:-6])


def test_every_minted_key_passes_an_independent_offline_scanner():
    minted = [keys.new_key_string(keys.new_key_id()) for _ in range(300)]
    assert all(scanner_accepts(k) for k in minted)


def test_it_draws_a_new_id_and_secret_for_every_key(make_key):
    first, second = make_key(), make_key()
    assert first.key_id != second.key_id
    assert first.full_key[13:] != second.full_key[13:]


def test_a_scanner_refuses_any_one_character_typo(make_key):
    key = make_key()
    typos = [with_char_replaced(key.full_key, i) for i in range(4, 56) if i != 12]
    assert not any(scanner_accepts(t) for t in typos)


def test_the_api_accepts_a_token_whose_checksum_an_independent_scanner_computed(db, make_key):
    # Same id, a random secret body with a correct checksum: it passes the offline check, so
    # the service looks the id up and refuses the secret (not the shape).
    key = make_key()
    body = f"gsk_{key.key_id}_{'Z' * 37}"
    forged = body + expected_checksum(body)
    response = client_for(forged).get(f"{API}/account/keys/current")
    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_token"


def test_the_stored_hash_is_not_the_secret(make_key):
    key = make_key()
    stored = ApiKey.objects.get(key_id=key.key_id)
    secret = key.full_key[13:]
    assert secret not in stored.secret_hash
    assert stored.secret_hash not in key.full_key
    assert len(stored.secret_hash) == 64
