"""A suspended server refuses customer actions with 409 server_suspended."""

import pytest
from django.utils import timezone

from servers.errors import ServerSuspended
from servers.models import Server
from servers.suspension import refuse_if_suspended


def test_a_server_that_is_not_suspended_is_let_through():
    refuse_if_suspended(Server(suspended_at=None))


def test_a_suspended_server_is_refused_with_server_suspended():
    with pytest.raises(ServerSuspended) as refused:
        refuse_if_suspended(Server(suspended_at=timezone.now()))

    assert refused.value.code == "server_suspended"
