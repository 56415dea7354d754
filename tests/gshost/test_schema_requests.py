"""Request bodies are validated as the schema documents them: a string field takes only strings."""

import pytest

from tests.conftest import API, client_for, error_of

pytestmark = pytest.mark.django_db


def test_it_refuses_a_backup_name_that_is_not_a_string(make_key, acme_server):
    client = client_for(make_key(["backups:create"]))
    response = client.post(f"{API}/servers/{acme_server.id}/backups", {"name": 0}, format="json")
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == {"name"}


def test_it_refuses_a_console_command_that_is_not_a_string(make_key, acme_server):
    client = client_for(make_key(["console:write"]))
    response = client.post(f"{API}/servers/{acme_server.id}/console", {"command": 7}, format="json")
    assert response.status_code == 400
    assert set(error_of(response)["fields"]) == {"command"}
