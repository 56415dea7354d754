"""Run ``manage.py qcluster`` with the delivery engine resolving every webhook host to 127.0.0.1.

For the end-to-end tests and the benchmark, whose receivers listen on loopback under a public-
looking name. The resolver is swapped before the cluster forks its workers, which inherit it;
everything else (broker, database, CA bundle, allowed networks) comes from the environment.

    python -m tests.webhooks.loopback_qcluster
"""

import os
import sys
from functools import partial

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gshost.settings")
    sys.argv = [sys.argv[0], "qcluster"]  # as ``manage.py qcluster``, which the app looks for
    django.setup()
    from django.core.management import call_command

    from tests.webhooks.receiver import loopback_resolver
    from webhooks.targets import client

    client.sender_factory = partial(client.build_sender, resolve=loopback_resolver)
    call_command("qcluster")


if __name__ == "__main__":
    main()
