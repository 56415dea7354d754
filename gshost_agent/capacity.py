"""What this machine offers, for the node's capacity when staff set none (its heartbeat):
total memory, the free disk of the agent's data directory, 100 x its cores."""

import os
import shutil
from pathlib import Path

MEMINFO = Path("/proc/meminfo")
MB = 1024 * 1024


def total_memory_mb(meminfo: Path = MEMINFO) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def machine_capacity(data_dir: Path) -> dict[str, int | None]:
    """The heartbeat's `capacity`: each figure, or null where it cannot be read."""
    try:
        free_disk: int | None = shutil.disk_usage(data_dir).free // MB
    except OSError:
        free_disk = None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "memory_mb": total_memory_mb(),
        "disk_mb": free_disk,
        "cpu_percent": 100 * cores if cores else None,
    }
