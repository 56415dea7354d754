"""An unknown key id is answered with the same work as a known one with a wrong secret: both
from the process's memory once seen, and both with the secret hashed and compared."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts import keys
from tests.accounts.test_authentication import well_formed_token
from tests.conftest import client_for

CURRENT = "/api/public/v1/account/keys/current"


def queries_of_a_second_call(token: str) -> int:
    client = client_for(token)
    client.get(CURRENT)
    with CaptureQueriesContext(connection) as captured:
        assert client.get(CURRENT).status_code == 401
    return len([q for q in captured.captured_queries if "accounts_apikey" in q["sql"]])


def test_an_unknown_key_id_costs_no_query_once_seen_like_a_known_one(make_key):
    known = make_key()
    assert queries_of_a_second_call(well_formed_token(known.key_id)) == 0
    assert queries_of_a_second_call(well_formed_token("Zz9Zz9Zz")) == 0


def test_the_secret_is_hashed_for_an_unknown_key_id_too(make_key, monkeypatch):
    known = make_key()
    compared: list[str] = []
    real = keys.secret_matches

    def counting(secret: str, stored_hash: str, pepper: bytes) -> bool:
        compared.append(secret)
        return real(secret, stored_hash, pepper)

    monkeypatch.setattr(keys, "secret_matches", counting)
    client_for(well_formed_token(known.key_id)).get(CURRENT)
    client_for(well_formed_token("Zz9Zz9Zz")).get(CURRENT)
    assert len(compared) == 2


def test_a_key_created_after_its_id_was_probed_works_at_once(make_key, monkeypatch):
    from accounts import services

    monkeypatch.setattr(services, "_unused_key_id", lambda: "Probed01")
    client_for(well_formed_token("Probed01")).get(CURRENT)  # remembered as unknown
    key = make_key()
    assert key.key_id == "Probed01"
    assert client_for(key).get(CURRENT).status_code == 200
