"""Benchmark: webhook deliveries through the real worker, against a bare keep-alive loop.

Runs, in one go on this machine:
  - a local HTTPS receiver (trustme certificate for *.bench.example.com) in its own process,
    so it does not share a GIL with anything measured;
  - the real worker: `qcluster` (tests/webhooks/loopback_qcluster.py: the stock command with the
    engine resolving *.bench.example.com to 127.0.0.1) on PostgreSQL with the Redis broker;
  - this process publishes events (webhooks.services.publish_event) fanning out to 50 webhooks.

Phases:
  1. warm-up; a bare keep-alive `requests.Session` loop posting the same signed bodies to the
     same receiver, one after another (deliveries/s);
  2. twice 10,000 deliveries published in one transaction: deliveries/s from its commit until
     every row is settled (publishing is timed apart); worker memory (PSS) before, after 10,000
     and after 20,000 (it must stay flat); then the bare loop again (the faster bare run is
     compared);
  3. paced events (EVENTS_PER_SECOND): event -> first attempt p50/p99 (receiver clock minus
     publish time, both CLOCK_MONOTONIC);
  4. the same with 10 more webhooks whose endpoints never answer: the healthy ones' latency.
Targets: rate >= 0.8 x bare, p50 < 250 ms, p99 < 1 s, healthy p99 with dead endpoints < 1 s
and < 1 s above the figure without them, worker memory growth over the second 10,000 < 10 %.
Exits 1 when a target is missed. Not part of `make test`.

Operational scenarios, each alone (bench/delivery_operations.py):
  --retry-lateness  >= 100 retries over >= 3 min with delays of 5 s, a worker restart in the
                    middle: p50/p99/max lateness against the 2 s target;
  --crash           SIGKILL of the worker mid-burst of 1,000: lost and re-sent counts, and
                    the retake: p99 from the kill until each row the dead worker held is
                    settled (<= 15 s), with a new worker started at once;
  --two-clusters    two workers, 10,000 deliveries without a fault (nothing lost or sent twice),
                    then 10,000 with one SIGKILLed: lost, re-sent, the survivor's retake rate;
                    both retakes are also set against as many bare requests, each on a new TLS
                    connection (what a retake must open), measured in the same run;
  --stop            SIGTERM to the main process, SIGTERM to the process group, and SIGINT
                    (Ctrl-C) with deliveries in flight: seconds until no process is left (<= 15).
  --redis-outage    the broker killed for 75 s while events are published, then restarted:
                    errors raised to the caller (0), rows lost (0), event -> first attempt
                    during the outage against before it (p99 < 1 s).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import delivery_operations
from bench.delivery_rig import (
    DOMAIN,
    HEALTHY_WEBHOOKS,
    Receiver,
    cpu_seconds,
    create_webhooks,
    group_memory_mb,
    percentile,
    prepare_database,
    publish,
    publish_burst,
    record_delay_buckets,
    record_delays,
    roles,
    setup_django,
    start_worker,
    unsettled,
    wait_until,
)

DEAD_WEBHOOKS = int(os.environ.get("BENCH_DEAD_WEBHOOKS", "10"))
BATCH_DELIVERIES = int(os.environ.get("BENCH_DELIVERIES", "10000"))
EVENTS_PER_SECOND = float(os.environ.get("BENCH_EVENTS_PER_SECOND", "4"))
LATENCY_SECONDS = float(os.environ.get("BENCH_LATENCY_SECONDS", "15"))
BARE_REQUESTS = int(os.environ.get("BENCH_BARE_REQUESTS", "3000"))


def resolve_bench_names_to_loopback() -> None:
    """For the bare loop in this process: *.bench.example.com is the local receiver."""
    original = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(DOMAIN):
            host = "127.0.0.1"
        return original(host, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]


# --- phases --------------------------------------------------------------------------------------


def burst(organization_id: str, deliveries: int) -> tuple[float, float]:
    """Publish ``deliveries`` (fan-out 50) in one transaction, so that all of them are due at
    once when it commits; returns (engine deliveries/s, publishing deliveries/s).

    The engine is timed from the commit (nothing is handed to it before) until every row is
    settled. The bare loop starts with its bodies in hand too, so both sides are timed on
    delivering alone; one process publishing event after event would otherwise set the pace
    (it did: ~65 ms an event while sharing the cores). Publishing is timed on its own.
    """
    cpu_before = cpu_seconds()
    publishing = time.monotonic()
    publish_burst(organization_id, deliveries)
    started = time.monotonic()
    wait_until(lambda: unsettled() == 0, 300, "the burst to be delivered")
    elapsed = time.monotonic() - started
    if os.environ.get("BENCH_CPU"):
        used = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_seconds().items()}
        print(f"  burst of {deliveries} delivered in {elapsed:.1f} s; CPU s: " + ", ".join(
            f"{k} {v:.1f}" for k, v in sorted(used.items())))  # fmt: skip
    return deliveries / elapsed, deliveries / (started - publishing)


def paced(organization_id: str, receiver: Receiver, healthy: set[str]) -> list[float]:
    """Publish at EVENTS_PER_SECOND for LATENCY_SECONDS; latencies (ms) of healthy deliveries."""
    published: dict[str, float] = {}
    interval = 1 / EVENTS_PER_SECOND
    start = time.monotonic()
    for n in range(int(LATENCY_SECONDS * EVENTS_PER_SECOND)):
        time.sleep(max(0.0, start + n * interval - time.monotonic()))
        at, deliveries = publish(organization_id)
        published.update((d, at) for d, w in deliveries if w in healthy)
        receiver.drain()
    wait_until(
        lambda: receiver.drain() or all(d in receiver.seen for d in published),
        60,
        "paced deliveries to arrive",
    )
    return [(receiver.seen[d] - at) * 1000 for d, at in published.items()]


def bare_loop(port: int, ca_pem_path: str, secret: str) -> float:
    import requests

    from webhooks.models import Delivery

    bodies = [b.encode() for b in Delivery.objects.values_list("body", flat=True)[:BARE_REQUESTS]]
    url = f"https://hook-0.{DOMAIN}:{port}/h/0"
    session = requests.Session()
    session.verify = ca_pem_path
    session.trust_env = False
    started = time.monotonic()
    for body in bodies:
        timestamp = str(int(time.time()))
        signature = hmac.new(
            secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256
        ).hexdigest()
        headers = {
            "Content-Type": "application/json",
            "X-Webhook-Signature": signature,
            "X-Webhook-Timestamp": timestamp,
            "User-Agent": "Service-Webhooks/1",
        }
        session.post(url, data=body, headers=headers, timeout=10).raise_for_status()
    return len(bodies) / (time.monotonic() - started)


# --- main ----------------------------------------------------------------------------------------


def main() -> None:
    """Without arguments the throughput and latency run; ``--retry-lateness``, ``--crash`` and
    ``--stop`` run the engine's operational scenarios (bench/delivery_operations.py) alone."""
    scenarios = [a for a in sys.argv[1:] if a.startswith("--")]
    if scenarios:
        raise SystemExit(delivery_operations.run(scenarios))
    prepare_database()
    dead_paths = [f"/dead/{n}" for n in range(DEAD_WEBHOOKS)]
    receiver = Receiver(dead_paths)
    setup_django()
    resolve_bench_names_to_loopback()
    organization_id, healthy_list = create_webhooks(receiver.port, "hook", HEALTHY_WEBHOOKS, "/h")
    healthy = set(healthy_list)
    worker = start_worker(receiver.ca_pem_path)
    roles["worker"] = worker.pid
    failures: list[str] = []
    try:
        results = run_phases(organization_id, receiver, healthy, worker.pid)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        receiver.stop()
    report(results, failures)
    failures += record_delays("bursts, CPU saturated", results["delays_before_bursts"])
    failures += record_delays(
        f"paced, {EVENTS_PER_SECOND * HEALTHY_WEBHOOKS:.0f} deliveries/s",
        results["delays_before_paced"],
    )
    if failures:
        print("\nMISSED: " + "; ".join(failures))
        raise SystemExit(1)
    print("\nAll targets met.")


def run_phases(
    organization_id: str, receiver: Receiver, healthy: set[str], pgid: int
) -> dict[str, Any]:
    time.sleep(3)  # the cluster starting
    burst(organization_id, 1000)  # warm-up: workers, thread pools, connections
    bare_before = bare(receiver)
    delays_before_bursts = record_delay_buckets()
    mem_before = group_memory_mb(pgid)
    rate, publish_rate = burst(organization_id, BATCH_DELIVERIES)
    mem_after = group_memory_mb(pgid)
    second_rate, second_publish_rate = burst(organization_id, BATCH_DELIVERIES)
    mem_after_second = group_memory_mb(pgid)
    bare_after = bare(receiver)
    delays_before_paced = record_delay_buckets()
    receiver.drain()
    latencies = paced(organization_id, receiver, healthy)
    create_webhooks(receiver.port, "dead", DEAD_WEBHOOKS, "/dead")
    with_dead = paced(organization_id, receiver, healthy)
    return {
        "rate": min(rate, second_rate),
        "publish_rate": min(publish_rate, second_publish_rate),
        "bare": max(bare_before, bare_after),
        "p50": statistics.median(latencies),
        "p99": percentile(latencies, 0.99),
        "dead_p50": statistics.median(with_dead),
        "dead_p99": percentile(with_dead, 0.99),
        "dead_max": max(with_dead),
        "mem_before": mem_before,
        "mem_after": mem_after,
        "mem_after_second": mem_after_second,
        "samples": len(latencies),
        "delays_before_bursts": delays_before_bursts,
        "delays_before_paced": delays_before_paced,
    }


def bare(receiver: Receiver) -> float:
    """The bare loop, posting to the first webhook's URL with its own secret."""
    from webhooks.models import Webhook
    from webhooks.secrets import decrypt_secret

    webhook = Webhook.objects.get(url__contains="//hook-0.")
    secret = decrypt_secret(webhook.encrypted_secret) or ""
    rate = bare_loop(receiver.port, receiver.ca_pem_path, secret)
    receiver.drain()
    return rate


def report(r: dict[str, Any], failures: list[str]) -> None:
    ratio = r["rate"] / r["bare"]
    growth = (r["mem_after_second"] - r["mem_after"]) / r["mem_after"]
    added = r["dead_p99"] - r["p99"]
    lines = [
        f"Webhook deliveries ({BATCH_DELIVERIES} per burst, fan-out {HEALTHY_WEBHOOKS})",
        f"  worker deliveries/s     {r['rate']:7.0f}   (the slower of two bursts)",
        f"  bare requests loop /s   {r['bare']:7.0f}   (the faster of two runs)",
        f"  ratio                   {ratio:7.2f}   (target >= 0.80)",
        f"  publishing /s           {r['publish_rate']:7.0f}   "
        "(rows written by publish_event in one process; not in the ratio)",
        f"  event -> first attempt  p50 {r['p50']:.0f} ms (< 250), p99 {r['p99']:.0f} ms (< 1000)"
        f"  [{int(r['samples'])} deliveries at {EVENTS_PER_SECOND:g} events/s]",
        f"  with {DEAD_WEBHOOKS} dead endpoints  p50 {r['dead_p50']:.0f} ms, "
        f"p99 {r['dead_p99']:.0f} ms, max {r['dead_max']:.0f} ms (p99 {added:+.0f} ms)",
        f"  worker memory (PSS)     {r['mem_before']:.0f} MB -> {r['mem_after']:.0f} MB after "
        f"{BATCH_DELIVERIES} -> {r['mem_after_second']:.0f} MB after {2 * BATCH_DELIVERIES} "
        f"({growth:+.1%} over the second batch, target < 10%)",
    ]
    print("\n".join(lines))
    checks = [
        (ratio >= 0.8, f"rate ratio {ratio:.2f} < 0.80"),
        (r["p50"] < 250, f"p50 {r['p50']:.0f} ms >= 250"),
        (r["p99"] < 1000, f"p99 {r['p99']:.0f} ms >= 1000"),
        (r["dead_p99"] < 1000 and added < 1000, f"healthy p99 with dead {r['dead_p99']:.0f} ms"),
        (growth < 0.10, f"worker memory grew {growth:.1%}"),
    ]
    failures.extend(message for ok, message in checks if not ok)


if __name__ == "__main__":
    main()
