"""The OpenAPI schema and the human docs are public, complete, and load nothing from a CDN."""

import re

import pytest

from tests.conftest import API

pytestmark = pytest.mark.django_db


def test_it_serves_the_openapi_schema_without_a_key(client):
    response = client.get(f"{API}/schema/?format=json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")


def test_it_documents_every_public_route(client):
    paths = client.get(f"{API}/schema/?format=json").json()["paths"]
    for route in [
        "/account/keys/current",
        "/account/keys",
        "/account/keys/{key_id}",
        "/account/audit",
        "/webhooks",
        "/webhooks/{webhook_id}/deliveries/redeliver",
        "/servers/{server_id}/realtime-stats",
        "/jobs/{job_id}",
    ]:
        assert f"{API}{route}" in paths


def test_it_describes_the_bearer_key_scheme(client):
    schema = client.get(f"{API}/schema/?format=json").json()
    scheme = schema["components"]["securitySchemes"]["ApiKey"]
    assert scheme == {**scheme, "type": "http", "scheme": "bearer"}


def test_it_serves_the_docs_page_with_local_assets_only(client):
    page = client.get(f"{API}/docs/")
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.content.decode())
    assert sources, "the docs page loads its assets"
    assert all(not s.startswith(("http://", "https://", "//")) for s in sources), sources
