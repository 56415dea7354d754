"""The web service for the benchmarks: gunicorn with the shipped configuration
(gunicorn.conf.py), as production runs it; only its address, log sinks and the environment a
benchmark adds differ."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

from tests.processes import stop_group

ROOT = Path(__file__).resolve().parent.parent
GUNICORN = ROOT / ".venv" / "bin" / "gunicorn"
# The access log's lines: method, path, status, microseconds taken (request read to response
# written), so a benchmark can read gunicorn's own handling times.
ACCESS_FORMAT = "%(m)s %(U)s %(s)s %(D)s"
START_SECONDS = 30.0


def gunicorn_start(
    port: int, *, access_log: Path | str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """gunicorn on 127.0.0.1:`port` with the benchmark's environment `env`, in a process
    group of its own, once `/healthz` answers. The access log is written (to /dev/null if
    that is `access_log`), so its cost is measured."""
    process = subprocess.Popen(
        [str(GUNICORN), "-c", str(ROOT / "gunicorn.conf.py"), "gshost.wsgi",
         "--access-logformat", ACCESS_FORMAT],
        cwd=ROOT,
        env={
            **env,
            "GUNICORN_BIND": f"127.0.0.1:{port}",
            "GUNICORN_ACCESS_LOG": str(access_log),
            "GUNICORN_LOG_LEVEL": "warning",
        },
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return process
        except OSError:
            time.sleep(0.1)
    stop_group(process, timeout=5)
    raise SystemExit("gunicorn did not start")


def gunicorn_stop(process: subprocess.Popen[bytes]) -> None:
    """The whole group (master and workers): SIGTERM, then SIGKILL if it lingers."""
    stop_group(process, timeout=30)
