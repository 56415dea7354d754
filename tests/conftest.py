"""The shared cast: alice owns Acme, bob is an Acme member with a few scopes, charlie runs
Globex (another organization). Keys are minted through the same service the panel uses."""

import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import freezegun
import hypothesis
import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import Membership, Organization, User
from accounts.services import api_key_create, member_add, organization_create
from audit.actors import Actor
from audit.services import PanelContext
from gshost import process_state, withdrawals
from servers.models import Server
from servers.services import server_create
from tests import no_delay  # noqa: F401 - test servers answer without Nagle's delay

# pytest's own clock must stay real under frozen time, or --durations reports nonsense.
freezegun.configure(extend_ignore_list=["_pytest.timing"])

# Hypothesis's timing checks measure the machine, not the property: the suite's five parts
# share two cores, and a draw that takes a second there is load, not a slow strategy.
hypothesis.settings.register_profile(
    "gshost", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
hypothesis.settings.load_profile("gshost")

API = "/api/public/v1"


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """On SQLite the test database is a file of this run's own, never memory. Django gives an
    in-memory database's one connection to every thread of the live server, so two requests at
    once (a page and its favicon, an agent's heartbeat and a report) fail with "database table
    is locked". With a file each thread has a connection of its own, as the service has."""
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        database.setdefault("TEST", {})["NAME"] = str(
            tmp_path_factory.mktemp("db") / "test.sqlite3"
        )


@pytest.fixture(autouse=True)
def _isolated_process_state(settings: Any) -> Iterator[None]:
    settings.AUDIT_FLUSH_INTERVAL_SECONDS = 0
    _forget_process_state()
    yield
    _forget_process_state()


def _forget_process_state() -> None:
    process_state.reset_all()
    cache.clear()


@pytest.fixture
def acme(db: None) -> Organization:
    return organization_create(slug="acme", name="Acme")


@pytest.fixture
def globex(db: None) -> Organization:
    return organization_create(slug="globex", name="Globex")


@pytest.fixture
def alice(acme: Organization) -> Membership:
    return member_add(
        organization=acme, email="alice@acme.test", password="alice-pw-123", owner=True
    )


@pytest.fixture
def bob(acme: Organization) -> Membership:
    return member_add(
        organization=acme,
        email="bob@acme.test",
        password="bob-pw-123",
        member_scopes=["servers:read", "keys:read"],
    )


@pytest.fixture
def charlie(globex: Organization) -> Membership:
    return member_add(
        organization=globex, email="charlie@globex.test", password="charlie-pw-123", owner=True
    )


@pytest.fixture
def acme_server(acme: Organization) -> Server:
    return server_create(
        actor=Actor.system("test"), organization=acme, name="Survival", game="minecraft"
    )


@pytest.fixture
def acme_other_server(acme: Organization) -> Server:
    return server_create(
        actor=Actor.system("test"), organization=acme, name="Creative", game="custom"
    )


@pytest.fixture
def globex_server(globex: Organization) -> Server:
    return server_create(
        actor=Actor.system("test"), organization=globex, name="Globex world", game="minecraft"
    )


@dataclass
class IssuedKey:
    key_id: str
    full_key: str
    organization_id: str


KeyMaker = Callable[..., IssuedKey]


@pytest.fixture
def make_key(alice: Membership) -> KeyMaker:
    def make(
        scopes: Iterable[str] = (),
        *,
        membership: Membership | None = None,
        name: str | None = None,
        **options: Any,
    ) -> IssuedKey:
        creator = membership or alice
        make.count += 1  # type: ignore[attr-defined]
        new = api_key_create(
            membership=creator,
            name=name or f"key-{make.count}",  # type: ignore[attr-defined]
            scopes=list(scopes),
            actor=Actor.person(PanelContext(user_email=creator.user.email)),
            **options,
        )
        return IssuedKey(new.key.key_id, new.full_key, new.key.organization_id)

    make.count = 0  # type: ignore[attr-defined]
    return make


def client_for(key: IssuedKey | str | None = None) -> APIClient:
    client = APIClient()
    token = key.full_key if isinstance(key, IssuedKey) else key
    if token is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]


# The shared cast signed in to the panel, one test client each.
@pytest.fixture
def alice_client(client: Client, alice) -> Client:
    client.force_login(alice.user)
    return client


@pytest.fixture
def bob_client(client: Client, bob) -> Client:
    client.force_login(bob.user)
    return client


@pytest.fixture
def charlie_client(client: Client, charlie) -> Client:
    client.force_login(charlie.user)
    return client


@pytest.fixture
def staff(db: None) -> User:
    """A superuser of the Django admin (staff of the hosting company, in no organization)."""
    return User.objects.create_superuser(email="staff@gshost.test", password="staff-pw-123")


@pytest.fixture
def staff_client(staff: User) -> Client:
    """A Django admin session of `staff`."""
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def withdrawn(monkeypatch: pytest.MonkeyPatch) -> list[withdrawals.Withdrawal]:
    """The withdrawals of access given to the carriers after commit (the nodes' carrier is not
    registered in these tests)."""
    given: list[withdrawals.Withdrawal] = []
    monkeypatch.setattr(withdrawals, "_carriers", [given.append])
    return given


@pytest.fixture
def one_rate_window(request: pytest.FixtureRequest) -> Iterator[None]:
    """The clock at the start of a minute of this test's own, ticking on from there: the calls
    it counts against a rate limit fall in one fixed window (never across a minute's end), and
    no other test's counts, which Redis keeps for two minutes, share that window."""
    minute = zlib.crc32(request.node.nodeid.encode()) % 1_000_000
    start = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(minutes=minute)
    with freezegun.freeze_time(start, tick=True):
        yield
