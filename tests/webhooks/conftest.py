"""The fixtures every webhook test may ask for by name.

They are written in the modules that also hold the helpers they go with (`delivery_fixtures`
for the engine, `webhook_fixtures` for the API and panel, `receiver` for the HTTPS receiver)
and registered here, once, for the whole directory.
"""

from tests.webhooks.delivery_fixtures import (
    engine_settings_fixture,
    hooks_fixture,
    receiver_fixture,
)
from tests.webhooks.receiver import https_receiver_fixture
from tests.webhooks.webhook_fixtures import (
    admin_fixture,
    admin_key_fixture,
    outsider_fixture,
    webhook_fixture,
)

__all__ = [
    "admin_fixture",
    "admin_key_fixture",
    "engine_settings_fixture",
    "hooks_fixture",
    "https_receiver_fixture",
    "outsider_fixture",
    "receiver_fixture",
    "webhook_fixture",
]
