"""The stored hash of a key's secret: HMAC-SHA256 keyed with the server's pepper."""

import hashlib
import hmac

from accounts import keys

SECRET = "s3cretS3cretS3cretS3cretS3cretS3cretS3cre"


def test_hash_secret_is_hmac_sha256_of_the_secret_keyed_with_the_pepper():
    expected = hmac.new(b"pepper", SECRET.encode(), hashlib.sha256).hexdigest()
    assert keys.hash_secret(SECRET, b"pepper") == expected


def test_hash_secret_answers_the_same_for_the_same_secret_every_time():
    assert keys.hash_secret(SECRET, b"pepper") == keys.hash_secret(SECRET, b"pepper")


def test_hash_secret_depends_on_the_pepper():
    assert keys.hash_secret(SECRET, b"pepper") != keys.hash_secret(SECRET, b"other pepper")


def test_secret_matches_only_the_hash_of_the_same_secret():
    stored = keys.hash_secret(SECRET, b"pepper")
    assert keys.secret_matches(SECRET, stored, b"pepper")
    assert not keys.secret_matches(SECRET[:-1] + "x", stored, b"pepper")
