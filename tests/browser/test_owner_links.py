"""A customer's owner, as sold by a billing system, in a browser: the welcome email's link
sets a password once; a login link from the billing system's client area signs in once."""

import re
from urllib.parse import urlsplit

from django.core import mail
from playwright.sync_api import expect

from accounts.models import Organization
from application.customers import CustomerInput, customer_create
from application.integration_keys import integration_key_create
from application.links import owner_link_create
from application.models import LinkPurpose
from tests.browser.conftest import sign_in


def _customer() -> Organization:
    key = integration_key_create(name="whmcs", scopes=["customers:write"])
    organization, _ = customer_create(
        integration_pk=key.key.pk,
        data=CustomerInput(
            external_id="c-1", name="Shop", owner_email="ann@shop.test", owner_name="Ann",
            request_hash="",
        ),
    )  # fmt: skip
    return organization


def test_the_welcome_link_sets_a_password_the_owner_signs_in_with(page):
    _customer()
    [url] = [word for word in mail.outbox[0].body.split() if "/set-password/" in word]

    page.goto(urlsplit(url).path)
    page.fill("input[name=new_password1]", "a-long-new-pw-42")
    page.fill("input[name=new_password2]", "a-long-new-pw-42")
    page.get_by_role("button", name="Set password").click()

    expect(page).to_have_url(re.compile(r"/accounts/login/$"))
    expect(page.get_by_text("Your password is set.")).to_be_visible()
    page.goto(urlsplit(url).path)  # once only
    expect(page.get_by_text("That link was used already or has expired.")).to_be_visible()
    sign_in(page, "ann@shop.test", "a-long-new-pw-42")


def test_a_login_link_opens_the_panel_once(page, browser, live_server):
    organization = _customer()
    owner = organization.memberships.get().user
    link = owner_link_create(user=owner, organization=organization, purpose=LinkPurpose.SIGN_IN)

    page.goto(urlsplit(link.url).path)

    expect(page).to_have_url(re.compile(r"/panel/servers/$"))
    expect(page.get_by_text("ann@shop.test").first).to_be_visible()
    other = browser.new_context(base_url=live_server.url).new_page()
    other.goto(urlsplit(link.url).path)
    expect(other).to_have_url(re.compile(r"/accounts/login/$"))
    expect(other.get_by_text("That link was used already or has expired.")).to_be_visible()
    other.context.close()
