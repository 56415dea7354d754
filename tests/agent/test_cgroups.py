"""The keeper's cgroups from a plan (`keeper.Groups`), on the hierarchy the machine has:
cgroup v1 (a controller each) here, cgroup v2 (one group, every controller) where it runs."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from gshost_agent.keeper import Groups
from gshost_agent.node import detect_memory_root

V1 = Path("/sys/fs/cgroup")
V2 = Path("/sys/fs/cgroup")  # the unified hierarchy, where a machine mounts it


def v2_reason() -> str | None:
    controllers = V2 / "cgroup.controllers"
    if not controllers.exists():
        return "no cgroup v2 hierarchy at /sys/fs/cgroup (this machine has v1)"
    if not {"memory", "pids", "cpu"} <= set(controllers.read_text().split()):
        return "cgroup v2 without its memory, pids and cpu controllers"
    if not os.access(V2, os.W_OK):
        return "cgroup v2 is not writable here"
    return None


def plan(**paths: str) -> dict[str, object]:
    return {"memory_mb": 96, "processes": 30, "cpu_percent": 25, **paths}


def test_a_v1_plan_sets_memory_pids_and_cpu_and_is_removed():
    if not all(
        (V1 / name).is_dir() and os.access(V1 / name, os.W_OK) for name in ("memory", "pids", "cpu")
    ):
        pytest.skip("no writable cgroup v1 memory, pids and cpu controllers")
    name = f"gshost-test-{secrets.token_hex(4)}"
    groups = Groups(
        plan(
            cgroup=str(V1 / "memory" / name),
            cgroup_version=1,
            cgroup_pids=str(V1 / "pids" / name),
            cgroup_cpu=str(V1 / "cpu" / name),
        )
    )
    groups.create()
    try:
        assert int((V1 / "memory" / name / "memory.limit_in_bytes").read_text()) == 96 << 20
        assert (V1 / "pids" / name / "pids.max").read_text().strip() == "30"
        assert (V1 / "cpu" / name / "cpu.cfs_quota_us").read_text().strip() == "25000"
        assert (V1 / "cpu" / name / "cpu.cfs_period_us").read_text().strip() == "100000"
    finally:
        groups.remove()
    assert not any((V1 / c / name).exists() for c in ("memory", "pids", "cpu"))


def test_a_v2_plan_sets_memory_pids_and_cpu_in_one_group_and_is_removed():
    reason = v2_reason()
    if reason is not None:
        pytest.skip(reason)
    root = detect_memory_root()  # enables the controllers for the agent's groups, as it does
    assert root is not None and root.version == 2
    group = root.path / f"gshost-test-{secrets.token_hex(4)}"
    groups = Groups(plan(cgroup=str(group), cgroup_version=2))
    groups.create()
    try:
        assert int((group / "memory.max").read_text()) == 96 << 20
        assert (group / "pids.max").read_text().strip() == "30"
        assert (group / "cpu.max").read_text().split() == ["25000", "100000"]
    finally:
        groups.remove()
    assert not group.exists()
