"""The project's settings for the test suite: gshost.settings, with a test-only SECRET_KEY
when the environment gives none (outside DEBUG the service refuses to start without one), and
no settings file unless the environment names one: the `.env` that `make run` writes in the
checkout (DEBUG=true) is for running, never for the tests.

Set in the environment, so the processes tests start (gunicorn, qcluster) get it too.
"""

import atexit
import os
import shutil
import tempfile

from django.conf import global_settings

os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-" + "x1y2z3" * 6)
os.environ.setdefault("ENV_FILE", os.devnull)
# Staff tests sign in to /admin/ with force_login; the tests of the rule turn it on themselves.
os.environ.setdefault("ADMIN_REQUIRE_2FA", "false")


# Metrics of its own for each test run (its workers and servers inherit it): /metrics adds up
# every process's files in the directory, and two runs at once, or a `make run` of the same
# checkout, would otherwise count each other's requests and attempts.
if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="gshost-test-metrics-")
    atexit.register(shutil.rmtree, os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)

from gshost.settings import *  # noqa: F403

# The default hasher costs about 0.3 s of CPU per password, a third of some tests' time; no
# test is about the hasher. The shipped hashers stay listed, so a password hashed by a process
# on gshost.settings still checks.
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    *global_settings.PASSWORD_HASHERS,
]
