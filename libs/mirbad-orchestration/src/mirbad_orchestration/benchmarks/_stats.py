"""The statistics of the suites: medians and nearest-rank percentiles.

Nearest rank (the smallest value with at least p % of the values at or below it) never interpolates, so
a percentile is always a latency that was measured.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["median", "nearest_rank"]


def nearest_rank(values: Sequence[float], percent: float) -> float:
    """The ``percent``-th percentile of ``values`` by nearest rank.

    Raises:
        ValueError: ``values`` is empty or ``percent`` is outside (0, 100].
    """
    if not values:
        raise ValueError("no values")
    if not 0 < percent <= 100:
        raise ValueError(f"percent must be in (0, 100], not {percent}")
    ordered = sorted(values)
    rank = math.ceil(percent / 100 * len(ordered))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (the mean of the middle two for an even count).

    Raises:
        ValueError: ``values`` is empty.
    """
    if not values:
        raise ValueError("no values")
    return float(statistics.median(values))
