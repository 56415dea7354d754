from tests.conftest import API, client_for


def test_it_returns_the_calling_keys_record(make_key):
    key = make_key(["servers:read"])
    response = client_for(key).get(f"{API}/account/keys/current")
    assert response.status_code == 200, response.content
    assert response.json()["id"] == key.key_id
