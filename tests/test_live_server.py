"""The live server that browser tests and agents talk to answers requests that arrive at once,
as the service does: its threads never share one database connection."""

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_answers_sign_ins_that_arrive_at_once(live_server: Any, alice) -> None:
    def wrong_sign_in(_: int) -> int:
        with requests.Session() as browser:
            browser.get(f"{live_server.url}/accounts/login/", timeout=30)
            answer = browser.post(
                f"{live_server.url}/accounts/login/",
                data={
                    "username": "alice@acme.test",
                    "password": "not-her-password",
                    "csrfmiddlewaretoken": browser.cookies["csrftoken"],
                },
                headers={"Referer": live_server.url},
                timeout=30,
            )
            return answer.status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = Counter(pool.map(wrong_sign_in, range(160)))

    assert set(statuses) <= {200, 429}, statuses
