"""Reading a metric the way Prometheus would: from ``/metrics``' text, every process added up."""

from __future__ import annotations

import re

from gshost.monitoring import metrics


def sample(name: str, **labels: str) -> float:
    """The value of ``name`` with exactly ``labels``; 0 when it has none yet."""
    text = metrics.render().decode()
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    pattern = re.escape(name) + (r"\{" + re.escape(wanted) + r"\}" if labels else "") + r" (\S+)"
    match = re.search("^" + pattern + "$", text, re.MULTILINE)
    return float(match[1]) if match else 0.0
