"""Batch-composition helpers shared by methods: proportional counts, and `Mixture`, which draws a
batch from several tables in fixed fractions.

Each returned `Sample` marks in `sources` which source every rollout came from.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from llm_replay.buffer import ReplayTable, Sample


def round_half_up(x: float) -> int:
    """round() as the papers mean it (Python's round() goes to even on .5)."""
    return math.floor(x + 0.5)


def split_counts(total: int, fractions: Sequence[float]) -> list[int]:
    """Integer counts summing to `total`, proportional to `fractions` (largest remainder)."""
    weights = np.asarray(fractions, dtype=np.float64)
    if weights.ndim != 1 or len(weights) == 0 or np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError(f"fractions = {list(fractions)}: need non-negative values, positive sum")
    exact = weights / weights.sum() * total
    counts = np.floor(exact).astype(int)
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[: total - counts.sum()]] += 1
    return [int(c) for c in counts]


def with_source(sample: Sample, source: int) -> Sample:
    return dataclasses.replace(sample, sources=np.full(len(sample), source, dtype=np.int8))


class Mixture:
    """Draw a batch from several tables in fixed proportions."""

    def __init__(self, sources: Sequence[tuple[ReplayTable, float]]) -> None:
        if not sources:
            raise ValueError("sources: a mixture needs at least one (table, fraction)")
        for index, (table, fraction) in enumerate(sources):
            if not isinstance(table, ReplayTable):
                raise TypeError(f"sources[{index}] = {table!r}: must be a ReplayTable")
            if not (math.isfinite(fraction) and fraction >= 0):
                raise ValueError(f"sources[{index}].fraction = {fraction!r}: must be >= 0")
        self.tables = [t for t, _ in sources]
        self.fractions = [float(f) for _, f in sources]
        split_counts(1, self.fractions)  # validates the fractions

    def sample(self, batch_size: int, *, timeout: float | None = None) -> Sample:
        counts = split_counts(batch_size, self.fractions)
        parts = []
        for index, (table, count) in enumerate(zip(self.tables, counts, strict=True)):
            if count:
                parts.append(with_source(table.sample(count, timeout=timeout), index))
        return Sample.concat(parts)
