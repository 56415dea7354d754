"""The project's settings for the test suite: gshost.settings, with a test-only SECRET_KEY
when the environment gives none (outside DEBUG the service refuses to start without one).

Set in the environment, so the processes tests start (gunicorn, qcluster) get it too.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-" + "x1y2z3" * 6)

from gshost.settings import *  # noqa: F403
