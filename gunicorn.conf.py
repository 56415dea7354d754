"""gunicorn's configuration, read by `gunicorn gshost.wsgi` (or plain `gunicorn`) run from the
checkout. Every value can be changed from the environment.

Two worker processes, each with a pool of threads (gthread): a request that waits on the
network - a webhook test ping waits up to WEBHOOK_TIMEOUT_SECONDS for a slow receiver - holds
one thread, not a whole process, so other requests are still answered. Test pings are also
capped per organization (two at once), so one organization cannot hold every thread.
"""

import os
from pathlib import Path

from gshost.monitoring.directory import multiproc_dir

# The master reaps workers (child_exit below) without loading Django: it must know the
# directory the workers write their metrics to, and they inherit it from here.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", multiproc_dir(Path(__file__).resolve().parent))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)

wsgi_app = "gshost.wsgi:application"
bind = [os.environ.get("GUNICORN_BIND") or f"0.0.0.0:{os.environ.get('PORT', '8000')}"]
workers = int(os.environ.get("GUNICORN_WORKERS", "2"))
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "8"))
# A request may wait WEBHOOK_TIMEOUT_SECONDS (10) on a receiver; leave it ample room.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "20"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))
# Logs go to stdout/stderr for the process supervisor; GUNICORN_ACCESS_LOG="" turns the
# access log off, a path sends it to a file.
_access_log = os.environ.get("GUNICORN_ACCESS_LOG", "-")
accesslog = _access_log or None
errorlog = os.environ.get("GUNICORN_ERROR_LOG", "-")
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
# X-Forwarded-For is judged by the application (TRUSTED_PROXIES), not by gunicorn.
forwarded_allow_ips = os.environ.get("GUNICORN_FORWARDED_ALLOW_IPS", "127.0.0.1")
proc_name = "gshost-web"


def child_exit(server: object, worker: object) -> None:
    """A worker process has exited: Prometheus drops the samples only a live process keeps."""
    from gshost.monitoring.metrics import mark_process_dead

    mark_process_dead(worker.pid)  # type: ignore[attr-defined]
