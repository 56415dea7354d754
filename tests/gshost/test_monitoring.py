"""Probes and Prometheus metrics: /healthz, /readyz, /metrics."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from gshost.monitoring import metrics
from gshost.monitoring.middleware import route_of
from gshost.monitoring.views import metrics_allowed
from tests.conftest import client_for
from tests.webhooks.webhook_fixtures import make_delivery, webhook_fixture  # noqa: F401
from webhooks.models import DeliveryStatus


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in the Prometheus text format (0 when absent)."""
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    pattern = re.escape(name) + (r"\{" + re.escape(wanted) + r"\}" if labels else "") + r" (\S+)"
    match = re.search("^" + pattern + "$", text, re.MULTILINE)
    return float(match[1]) if match else 0.0


def scrape(client: Client) -> str:
    response = client.get("/metrics")
    assert response.status_code == 200
    return response.content.decode()


def test_it_answers_healthz(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_it_answers_readyz_when_the_database_answers(client, db, settings):
    settings.REDIS_URL = ""
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ready",
        "checks": {"database": "ok", "redis": "not_configured"},
    }


@pytest.mark.parametrize("probe", ["/healthz", "/readyz"])
def test_the_probes_answer_plain_http_despite_the_ssl_redirect(db, settings, monkeypatch, probe):
    from gshost.monitoring import views

    settings.SECURE_SSL_REDIRECT, settings.REDIS_URL = True, ""
    assert Client().get("/panel/").status_code == 301
    assert Client().get(probe).status_code == 200
    monkeypatch.setattr(views, "_database_ready", lambda: False)
    if probe == "/readyz":
        assert Client().get(probe).status_code == 503


def test_it_answers_503_when_redis_is_configured_but_unreachable(client, db, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "ok", "redis": "unavailable"}


def test_it_answers_503_when_the_database_is_unreachable(client, db, monkeypatch):
    from gshost.monitoring import views

    monkeypatch.setattr(views, "_database_ready", lambda: False)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "unavailable"


def test_it_serves_metrics_in_the_prometheus_text_format(client, db):
    response = client.get("/metrics")
    assert response["Content-Type"].startswith("text/plain; version=")
    assert "# TYPE gshost_http_requests_total counter" in response.content.decode()


def test_it_serves_metrics_past_the_empty_file_of_a_process_killed_as_it_started(client, db):
    # SIGKILL between creating a metrics file and sizing it leaves the file empty.
    empty = Path(metrics.metrics_dir()) / "histogram_4194305.db"  # above any default pid_max
    empty.touch()
    try:
        assert "gshost_http_requests_total" in scrape(client)
    finally:
        empty.unlink(missing_ok=True)  # folded away by the scrape


def test_it_hides_metrics_from_other_networks(db, settings):
    settings.METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    assert Client(REMOTE_ADDR="192.0.2.7").get("/metrics").status_code == 404


def test_it_serves_metrics_to_an_allowed_network(db, settings):
    settings.METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 200


def test_it_judges_a_proxied_caller_by_its_forwarded_address(rf, settings):
    settings.TRUSTED_PROXIES = ["127.0.0.1"]
    request = rf.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.9")
    assert not metrics_allowed(request)


def test_it_allows_ipv4_loopback_reported_as_ipv6(rf):
    assert metrics_allowed(rf.get("/metrics", REMOTE_ADDR="::ffff:127.0.0.1"))


def test_it_counts_requests_by_route_and_status(client, db):
    before = sample(
        scrape(client), "gshost_http_requests_total", route="healthz", method="GET", status="200"
    )
    client.get("/healthz")
    client.get("/healthz")
    after = sample(
        scrape(client), "gshost_http_requests_total", route="healthz", method="GET", status="200"
    )
    assert after - before == 2


def test_it_times_requests_by_route(client, db):
    before = sample(scrape(client), "gshost_http_request_duration_seconds_count", route="healthz")
    client.get("/healthz")
    after = sample(scrape(client), "gshost_http_request_duration_seconds_count", route="healthz")
    assert after - before == 1


def test_it_counts_failed_authentications_by_code(client, db):
    before = sample(scrape(client), "gshost_api_auth_failures_total", code="invalid_token")
    client_for("gsk_live_nonsense").get("/api/public/v1/webhooks")
    after = sample(scrape(client), "gshost_api_auth_failures_total", code="invalid_token")
    assert after - before == 1


def test_it_names_an_unknown_path_unmatched(rf):
    assert route_of(rf.get("/nowhere")) == "unmatched"


def test_it_reports_the_due_backlog_at_scrape(client, webhook):
    make_delivery(webhook, status=DeliveryStatus.PENDING, next_attempt_at=webhook.created_at)
    make_delivery(webhook, status=DeliveryStatus.SUCCESS)
    text = scrape(client)
    assert sample(text, "gshost_webhook_backlog_deliveries") == 1
    assert sample(text, "gshost_webhook_backlog_oldest_seconds") >= 0


def _write_counter(path: Path, value: float) -> None:
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    samples = MmapedDict(str(path))
    key = mmap_key("gshost_folded", "gshost_folded_total", [], [], "A test counter.")
    samples.write_value(key, value, 0.0)
    samples.close()


def _folded_total(directory: Path) -> float:
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    return registry.get_sample_value("gshost_folded_total") or 0.0


def test_it_folds_the_files_of_processes_that_are_gone_keeping_their_counts(tmp_path):
    gone = [tmp_path / f"counter_{pid}.db" for pid in (999_999_997, 999_999_998)]
    running = tmp_path / f"counter_{os.getpid()}.db"
    for path, value in zip([*gone, running], [1.0, 2.0, 4.0], strict=True):
        _write_counter(path, value)
    (tmp_path / "histogram_999999999.db").touch()  # killed before it was sized
    assert metrics.fold_gone_processes(str(tmp_path)) == 3
    assert sorted(p.name for p in tmp_path.glob("*.db")) == sorted(
        ["counter_gone.db", running.name]
    )
    assert _folded_total(tmp_path) == 7.0
    _write_counter(tmp_path / "counter_999999996.db", 8.0)  # another process came and went
    metrics.fold_gone_processes(str(tmp_path))
    assert _folded_total(tmp_path) == 15.0


def test_a_scrape_folds_the_files_of_processes_that_are_gone(client, db, tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    _write_counter(tmp_path / "counter_999999999.db", 3.0)
    assert sample(scrape(client), "gshost_folded_total") == 3.0
    assert [p.name for p in tmp_path.glob("*.db")] == ["counter_gone.db"]


def test_reaping_a_worker_drops_its_live_files_and_folds_its_counts(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    live, counts = tmp_path / "gauge_livesum_999999999.db", tmp_path / "counter_999999999.db"
    live.touch()
    _write_counter(counts, 5.0)
    metrics.mark_process_dead(999_999_999)
    assert (live.exists(), counts.exists()) == (False, False)
    assert _folded_total(tmp_path) == 5.0


def test_gunicorns_master_reaps_a_worker_without_loading_the_settings():
    """The master runs child_exit with only gunicorn.conf.py loaded: no Django settings and,
    unless the operator set it, no PROMETHEUS_MULTIPROC_DIR in its environment."""
    root = Path(__file__).resolve().parents[2]
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PROMETHEUS_MULTIPROC_DIR", "DJANGO_SETTINGS_MODULE"}
    }
    reap = (
        "import runpy, types; config = runpy.run_path('gunicorn.conf.py'); "
        "config['child_exit'](None, types.SimpleNamespace(pid=2**22 + 1))"
    )
    done = subprocess.run(
        [sys.executable, "-c", reap], cwd=root, env=environment, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
