"""The delivery engine in operation: retry lateness, a crash mid-burst, and stop times.

Run through bench/deliveries.py with one or more of ``--retry-lateness``, ``--crash``,
``--stop`` (see its docstring). Same set-up as the throughput run: a receiver process, the
real ``qcluster`` on PostgreSQL + Redis, this process publishing. Returns 1 when a target is
missed. Scale with BENCH_RETRY_SECONDS (default 180) and BENCH_CRASH_DELIVERIES (1000).
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench.deliveries import (
    Receiver,
    create_webhooks,
    percentile,
    prepare_database,
    publish,
    setup_django,
    start_worker,
    unsettled,
    wait_until,
)

RETRY_SECONDS = float(os.environ.get("BENCH_RETRY_SECONDS", "180"))
RETRY_DELAY = 5
RETRY_TARGET_SECONDS = 2.0
CRASH_DELIVERIES = int(os.environ.get("BENCH_CRASH_DELIVERIES", "1000"))
CRASH_WEBHOOKS = 50
RECORD_BOUND_SECONDS = 0.05
STOP_TARGET_SECONDS = 15.0
# The default lease margin (30 s) would make the crash run wait 40 s for the leases.
CRASH_LEASE_MARGIN = "5"


def run(flags: list[str]) -> int:
    scenarios: dict[str, Callable[[], list[str]]] = {
        "--retry-lateness": retry_lateness,
        "--crash": crash,
        "--stop": stop_times,
    }
    unknown = [flag for flag in flags if flag not in scenarios]
    if unknown:
        print(f"unknown flags {unknown}; choose from {sorted(scenarios)}")
        return 2
    failures: list[str] = []
    for flag in flags:
        close_django_connections()  # the database is dropped and made anew for each scenario
        prepare_database()
        setup_django()
        failures += scenarios[flag]()
    if failures:
        print("\nMISSED: " + "; ".join(failures))
        return 1
    print("\nAll targets met.")
    return 0


def close_django_connections() -> None:
    from django.conf import settings

    if settings.configured:
        from django.db import connections

        connections.close_all()


# --- processes ---------------------------------------------------------------------------------


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


def kill_group(worker: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()


def stop_and_time(worker: subprocess.Popen[bytes], send: Callable[[int], None]) -> float:
    """Send the stop signal; seconds until no process of the worker's group is left."""
    started = time.monotonic()
    send(worker.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.wait(timeout=60)
    while group_members(worker.pid) and time.monotonic() - started < 60:
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    if group_members(worker.pid) or worker.poll() is None:
        kill_group(worker)
        return float("inf")
    return elapsed


def settle(receiver: Receiver, timeout: float) -> None:
    wait_until(lambda: receiver.drain() or unsettled() == 0, timeout, "every delivery to settle")
    receiver.drain()


# --- retry lateness ----------------------------------------------------------------------------


def retry_lateness() -> list[str]:
    """Two webhooks answering 503: every delivery is retried five times, 5 s apart. An event
    every 3 s for RETRY_SECONDS, the worker restarted (SIGTERM) half-way. Lateness of a retry
    = its arrival - (the previous attempt's arrival + 5 s): recording time included."""
    paths = {f"/fail/{n}": {"status": 503} for n in range(2)}
    receiver = Receiver([], paths)
    organization_id, _ = create_webhooks(receiver.port, "retry", 2, "/fail")
    delays = {"WEBHOOK_RETRY_DELAYS": ",".join([str(RETRY_DELAY)] * 5)}
    worker = start_worker(receiver.ca_pem_path, **delays)
    restart_seconds = None
    try:
        time.sleep(3)
        start = time.monotonic()
        for n in range(int(RETRY_SECONDS / 3)):
            time.sleep(max(0.0, start + 3 * n - time.monotonic()))
            publish(organization_id)
            receiver.drain()
            if restart_seconds is None and time.monotonic() - start >= RETRY_SECONDS / 2:
                restart_seconds = stop_and_time(worker, lambda pid: os.kill(pid, signal.SIGTERM))
                worker = start_worker(receiver.ca_pem_path, **delays)
        settle(receiver, 120)
    finally:
        kill_group(worker)
        receiver.stop()
    lateness = [
        later - (earlier + RETRY_DELAY)
        for arrivals in receiver.arrivals.values()
        for earlier, later in zip(sorted(arrivals), sorted(arrivals)[1:], strict=False)
    ]
    p99 = percentile(lateness, 0.99)
    print(
        f"Retry lateness ({len(lateness)} retries over {RETRY_SECONDS:.0f} s, delays "
        f"{RETRY_DELAY} s, worker restarted half-way in {restart_seconds:.1f} s)\n"
        f"  p50 {statistics.median(lateness):.2f} s, p99 {p99:.2f} s, max {max(lateness):.2f} s"
        f"  (target p99 <= {RETRY_TARGET_SECONDS:.0f} s); over 10 s: "
        f"{sum(1 for v in lateness if v > 10)}"
    )
    failures = [] if p99 <= RETRY_TARGET_SECONDS else [f"retry lateness p99 {p99:.2f} s"]
    if len(lateness) < 100:
        failures.append(f"only {len(lateness)} retries measured")
    return failures


# --- crash -------------------------------------------------------------------------------------


def crash() -> list[str]:
    """SIGKILL of the whole worker group a third of the way through a burst; a new worker
    finishes it once the leases expire. Lost: never arrived. Re-sent: arrived twice or more."""
    from django.db import transaction

    receiver = Receiver([])
    organization_id, _ = create_webhooks(receiver.port, "crash", CRASH_WEBHOOKS, "/c")
    overrides = {"WEBHOOK_LEASE_MARGIN_SECONDS": CRASH_LEASE_MARGIN}
    worker = start_worker(receiver.ca_pem_path, **overrides)
    try:
        time.sleep(3)
        ids: list[str] = []
        with transaction.atomic():
            for _ in range(CRASH_DELIVERIES // CRASH_WEBHOOKS):
                ids += [delivery_id for delivery_id, _ in publish(organization_id)[1]]
        wait_until(lambda: receiver.drain() or len(receiver.seen) >= len(ids) // 3, 60, "a third")
        kill_group(worker)
        killed_at, left = time.monotonic(), unsettled()
        worker = start_worker(receiver.ca_pem_path, **overrides)
        settle(receiver, 300)
        settled_after = time.monotonic() - killed_at
    finally:
        kill_group(worker)
        receiver.stop()
    lost = sum(1 for d in ids if d not in receiver.arrivals)
    resent = sum(1 for d in ids if len(receiver.arrivals.get(d, [])) > 1)
    print(
        f"Crash: SIGKILL mid-burst of {len(ids)} deliveries\n"
        f"  lost {lost} (target 0), re-sent {resent} (only what was on the network or finished "
        f"in the last {RECORD_BOUND_SECONDS * 1000:.0f} ms); {left} rows left at the kill, "
        f"all settled {settled_after:.1f} s after it (lease 10 + {CRASH_LEASE_MARGIN} s)"
    )
    return [f"{lost} deliveries lost"] if lost else []


# --- stop times --------------------------------------------------------------------------------


def stop_times() -> list[str]:
    """With deliveries in flight (the receiver answers after 2 s): SIGTERM to the main process,
    SIGTERM to the process group (systemd's default), SIGINT to the group (Ctrl-C)."""
    signals: dict[str, Callable[[int], None]] = {
        "SIGTERM to the main process": lambda pid: os.kill(pid, signal.SIGTERM),
        "SIGTERM to the process group": lambda pid: os.killpg(pid, signal.SIGTERM),
        "SIGINT to the process group (Ctrl-C)": lambda pid: os.killpg(pid, signal.SIGINT),
    }
    receiver = Receiver([], {"": {"delay": 2.0}})
    organization_id, _ = create_webhooks(receiver.port, "stop", CRASH_WEBHOOKS, "/s")
    failures: list[str] = []
    ids: list[str] = []
    print("Stop time with deliveries in flight (target <= 15 s, nothing lost)")
    for name, send in signals.items():
        worker = start_worker(receiver.ca_pem_path)
        time.sleep(3)
        ids += [d for _ in range(10) for d, _w in publish(organization_id)[1]]
        enough = len(ids) - 400  # a fifth of this round's 500 on their way

        def sending(enough: int = enough) -> bool:
            receiver.drain()
            return len(receiver.seen) >= enough

        wait_until(sending, 60, "deliveries on the network")
        elapsed = stop_and_time(worker, send)
        print(f"  {name:<40} {elapsed:5.1f} s")
        if elapsed > STOP_TARGET_SECONDS:
            failures.append(f"{name}: {elapsed:.1f} s")
    worker = start_worker(receiver.ca_pem_path)
    try:
        settle(receiver, 300)
    finally:
        kill_group(worker)
        receiver.stop()
    lost = sum(1 for d in ids if d not in receiver.arrivals)
    print(f"  lost after the three stops: {lost} of {len(ids)}")
    return failures + ([f"{lost} lost across stops"] if lost else [])
