"""The endpoint-health chart of the deliveries page: stacked bars drawn as inline SVG.

Geometry is computed here, on the server, from the stats series; the template only writes the
shapes out. No script and no charting library: the page works under a strict CSP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from webhooks.health.stats import Bucket

WIDTH: Final = 720
HEIGHT: Final = 140
TOP: Final = 10  # room above the tallest bar
BOTTOM: Final = 20  # room for the time labels
GAP: Final = 2
LABEL_EVERY: Final = 6


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    succeeded_y: float
    succeeded_height: float
    failed_y: float
    failed_height: float
    title: str
    label: str  # a time label under every LABEL_EVERY-th bar, else ""


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    baseline: float
    label_y: float
    peak: int
    bars: list[Bar]


def health_chart(series: Sequence[Bucket]) -> Chart:
    """Bars of succeeded (bottom) and failed (stacked on top) deliveries, one per bucket."""
    peak = max((bucket.succeeded + bucket.failed for bucket in series), default=0)
    plot_height = HEIGHT - TOP - BOTTOM
    baseline = float(TOP + plot_height)
    slot = WIDTH / max(len(series), 1)
    scale = plot_height / peak if peak else 0.0
    bars = []
    for index, bucket in enumerate(series):
        succeeded_height = bucket.succeeded * scale
        failed_height = bucket.failed * scale
        bars.append(
            Bar(
                x=round(index * slot + GAP / 2, 2),
                width=round(max(slot - GAP, 1), 2),
                succeeded_y=round(baseline - succeeded_height, 2),
                succeeded_height=round(succeeded_height, 2),
                failed_y=round(baseline - succeeded_height - failed_height, 2),
                failed_height=round(failed_height, 2),
                title=(
                    f"{bucket.at:%Y-%m-%d %H:%M} UTC: {bucket.succeeded} succeeded, "
                    f"{bucket.failed} failed"
                ),
                label=f"{bucket.at:%H:%M}" if index % LABEL_EVERY == 0 else "",
            )
        )
    return Chart(
        width=WIDTH, height=HEIGHT, baseline=baseline, label_y=HEIGHT - 5, peak=peak, bars=bars
    )
