"""The Application API's cast: `billing`, an integration key with every scope, called over
HTTP against the running service (live_server), as a billing system would."""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from application.integration_keys import integration_key_create
from application.scopes import CATALOGUE

APP = "/api/application/v1"


@dataclass
class Billing:
    """A billing system's view of the service: its key, and calls with it."""

    base: str
    key: str

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        key: str | None = None,
        params: dict[str, str] | None = None,
        **headers: str,
    ) -> requests.Response:
        headers = {"Authorization": f"Bearer {key or self.key}", **headers}
        return requests.request(
            method,
            f"{self.base}{APP}{path}",
            json=body,
            params=params,
            headers=headers,
            timeout=30,
        )

    def customer(self, external_id: str = "c-1", email: str = "owner@shop.test") -> dict[str, Any]:
        body = {"external_id": external_id, "name": "Shop", "owner": {"email": email, "name": "O"}}
        answer = self.call("POST", "/customers", body)
        assert answer.status_code in (200, 201), answer.text
        return answer.json()  # type: ignore[no-any-return]


def mint(scopes: Iterable[str] = CATALOGUE, **options: Any) -> str:
    return integration_key_create(name="whmcs", scopes=scopes, **options).full_key


@pytest.fixture
def billing(live_server: Any) -> Billing:
    return Billing(base=live_server.url, key=mint())


def error_code(answer: requests.Response) -> str:
    body = answer.json()
    assert set(body) == {"error"}, body
    return str(body["error"]["code"])
