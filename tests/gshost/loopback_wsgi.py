"""gshost.wsgi with the webhook sender resolving every host to 127.0.0.1, so a test's local
receiver can stand behind a public-looking name. Run under the shipped gunicorn.conf.py:

    gunicorn -c gunicorn.conf.py tests.gshost.loopback_wsgi:application
"""

from functools import partial

from gshost.wsgi import application
from tests.webhooks.receiver import loopback_resolver
from webhooks.targets import client

client.sender_factory = partial(client.build_sender, resolve=loopback_resolver)

__all__ = ["application"]
