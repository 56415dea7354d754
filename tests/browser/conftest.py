"""Browser tests: Debian's Chromium driven by Playwright, against the live test server.

`scripts/ensure-browser.sh` (run by `make test`) installs `chromium` from apt when missing; no
browser is ever downloaded. It runs in a network namespace of its own
(tests/browser/quiet_network.py). A failing test shows what its pages met and leaves a
screenshot in tests/browser/screenshots/.
"""

import contextlib
import os
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.browser.quiet_network import QuietNetwork, quiet_network

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).with_name("screenshots")
TIMEOUT_MS = 30_000
expect.set_options(timeout=TIMEOUT_MS)  # assertions wait as long as actions, on a busy CI machine


class PageLog:
    """What a page met: its console, its failed requests and the answers of 400 and more. A
    failed test shows it, with where the page was and what its alerts said."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.lines: list[str] = []
        page.on(
            "console", lambda message: self.lines.append(f"console {message.type}: {message.text}")
        )
        page.on("pageerror", lambda error: self.lines.append(f"page error: {error}"))
        page.on(
            "requestfailed", lambda r: self.lines.append(f"failed: {r.method} {r.url} {r.failure}")
        )
        page.on("response", self._note_answer)

    def _note_answer(self, response: Any) -> None:
        if response.status >= 400:
            self.lines.append(
                f"answered {response.status}: {response.request.method} {response.url}"
            )

    def summary(self) -> str:
        try:
            alerts = [
                text for text in self.page.locator("[role=alert]:visible").all_inner_texts() if text
            ]
            where = [f"at {self.page.url}", *(f"alert: {text}" for text in alerts)]
        except Exception as error:  # the page may be gone; its log still helps
            where = [f"page unreadable: {error}"]
        return "\n".join([*where, *self.lines[-40:]])


OPEN_PAGES: weakref.WeakSet[PageLog] = weakref.WeakSet()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)
    if report.failed:
        for number, log in enumerate(list(OPEN_PAGES), start=1):
            report.sections.append((f"browser page {number}", log.summary()))


@pytest.fixture(scope="session", name="quiet_network")
def quiet_network_fixture() -> Iterator[QuietNetwork]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/ensure-browser.sh (make test does)")
    with quiet_network(CHROMIUM) as network:
        yield network


@contextlib.contextmanager
def chromium_launched(network: QuietNetwork, flags: list[str]) -> Iterator[Browser]:
    """Playwright's sync API keeps an event loop on this thread while the browser is open; the
    database set-up and the ORM calls the tests make between browser steps are still plain
    synchronous calls, which Django allows only when told so."""
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(
            executable_path=network.executable, args=[*flags, *network.flags]
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module", name="browser")
def browser_fixture(quiet_network: QuietNetwork) -> Iterator[Browser]:
    with chromium_launched(quiet_network, CHROMIUM_FLAGS) as browser:
        yield browser


@contextlib.contextmanager
def _page(
    browser: Browser, live_server: Any, request: pytest.FixtureRequest, **options: Any
) -> Iterator[Page]:
    """A page in a context of its own, screenshotted when the test fails."""
    context = browser.new_context(base_url=live_server.url, **options)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    log = PageLog(page)
    OPEN_PAGES.add(log)
    yield page
    OPEN_PAGES.discard(log)
    call = getattr(request.node, "report_call", None)
    if call is not None and call.failed:
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{request.node.name}.png"), full_page=True)
    context.close()


@pytest.fixture(name="page")
def page_fixture(
    browser: Browser, live_server: Any, request: pytest.FixtureRequest
) -> Iterator[Page]:
    with _page(browser, live_server, request) as page:
        yield page


@pytest.fixture(name="page_without_script")
def page_without_script_fixture(
    browser: Browser, live_server: Any, request: pytest.FixtureRequest
) -> Iterator[Page]:
    """As a person with JavaScript turned off sees the panel."""
    with _page(browser, live_server, request, java_script_enabled=False) as page:
        yield page


def sign_in(page: Page, email: str, password: str) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", email)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url("**/panel/**")
