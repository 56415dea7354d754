"""The project's settings for the test suite: gshost.settings, with a test-only SECRET_KEY
when the environment gives none (outside DEBUG the service refuses to start without one), and
no settings file unless the environment names one: the `.env` that `make run` writes in the
checkout (DEBUG=true) is for running, never for the tests.

Set in the environment, so the processes tests start (gunicorn, qcluster) get it too.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-" + "x1y2z3" * 6)
os.environ.setdefault("ENV_FILE", os.devnull)
# Staff tests sign in to /admin/ with force_login; the tests of the rule turn it on themselves.
os.environ.setdefault("ADMIN_REQUIRE_2FA", "false")

from gshost.settings import *  # noqa: F403
