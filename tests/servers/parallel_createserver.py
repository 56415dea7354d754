"""A process that runs `createserver` COUNT times as soon as START_AT (a Unix time) comes, so
that several of them place servers at the same moment. Prints one line a call: `ok srv_…`
or `refused <message>`. Used by test_parallel_placement.py."""

import os
import sys
import time
from io import StringIO

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from django.core.management import CommandError, call_command  # noqa: E402


def main(start_at: float, count: int, *args: str) -> None:
    time.sleep(max(0.0, start_at - time.time()))
    for n in range(count):
        out = StringIO()
        try:
            call_command("createserver", "acme", f"p{os.getpid()}-{n}", *args, stdout=out)
        except CommandError as refused:
            print(f"refused {refused}", flush=True)
        else:
            print(f"ok {out.getvalue().strip()}", flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:])
