"""A login link signs the customer's owner into the panel once, within 60 s; a second or a
late use lands on the sign-in page."""

from datetime import timedelta
from urllib.parse import urlsplit

import freezegun
import requests
from django.test import Client
from django.utils import timezone

from application.links import owner_link_create
from application.models import LinkPurpose
from audit.models import AuditRecord
from tests.accounts.second_factor_kit import SECOND_FACTOR, enrol_totp, is_signed_in
from tests.application.conftest import Billing


def link_path(billing: Billing, customer_id: str) -> str:
    answer = billing.call("POST", f"/customers/{customer_id}/login-link")
    assert answer.status_code == 200, answer.text
    return urlsplit(answer.json()["url"]).path


def test_a_login_link_signs_the_owner_in_once(billing: Billing):
    path = link_path(billing, billing.customer()["id"])

    first, second = requests.Session(), requests.Session()
    signed_in = first.get(billing.base + path, allow_redirects=False)
    panel = first.get(billing.base + "/panel/servers/", allow_redirects=False)
    used_again = second.get(billing.base + path, allow_redirects=False)

    assert signed_in.status_code == 302 and signed_in.headers["Location"] == "/panel/servers/"
    assert panel.status_code == 200
    assert used_again.status_code == 302 and used_again.headers["Location"] == "/accounts/login/"
    [audited] = AuditRecord.objects.filter(action="session.link_sign_in")
    assert (audited.actor_email, audited.path) == ("owner@shop.test", "/accounts/login/link/")


def test_a_login_link_expires_after_60_seconds(billing: Billing):
    answer = billing.call("POST", f"/customers/{billing.customer()['id']}/login-link").json()
    path = urlsplit(answer["url"]).path

    with freezegun.freeze_time(timezone.now() + timedelta(seconds=61)):
        late = Client().get(path)

    assert late.status_code == 302 and late["Location"] == "/accounts/login/"
    assert answer["expires_at"].endswith("Z")


def test_an_unknown_link_lands_on_the_sign_in_page(db):
    answer = Client().get("/accounts/login/link/not-a-token/")

    assert answer.status_code == 302 and answer["Location"] == "/accounts/login/"


def test_an_owner_with_a_second_factor_still_gives_it(db, alice, client):
    client.force_login(alice.user)
    enrol_totp(client)
    client.logout()
    link = owner_link_create(
        user=alice.user, organization=alice.organization, purpose=LinkPurpose.SIGN_IN
    )

    answer = client.get(urlsplit(link.url).path)

    assert answer.status_code == 302 and answer["Location"] == SECOND_FACTOR
    assert not is_signed_in(client)
